//go:build tools

// Package hack pins the code generators that hack/update-codegen.sh runs, so
// their versions live in go.mod beside the libraries they generate code for.
package hack

import (
	_ "k8s.io/code-generator"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
