package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/handler"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
)

func TestHelpPrintsTheFlagsAndSucceeds(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), []string{"--help"}, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run --help: %v, want flag.ErrHelp (which main treats as success)", err)
	}
	for _, want := range []string{"Usage: memcached-operator", "-namespace", "-image", "-metrics-addr", "-leader-elect", "-kubeconfig"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestUnknownFlagAndStrayArgumentsAreErrors(t *testing.T) {
	for _, args := range [][]string{{"--no-such-flag"}, {"extra"}} {
		var out bytes.Buffer
		if err := run(t.Context(), args, &out); err == nil || errors.Is(err, flag.ErrHelp) {
			t.Errorf("run %v: %v, want an error", args, err)
		}
	}
}

// TestDeployManifestMatchesTheProgram keeps deploy/operator.yaml honest: its
// arguments are flags this program knows, it runs as the ServiceAccount
// rbac.yaml binds, and its images are the ones `make images` builds.
func TestDeployManifestMatchesTheProgram(t *testing.T) {
	var dep appsv1.Deployment
	readManifest(t, "deploy/operator.yaml", &dep)
	var sa corev1.ServiceAccount
	readManifest(t, "deploy/rbac.yaml", &sa) // the first document
	if dep.Spec.Template.Spec.ServiceAccountName != sa.Name || dep.Namespace != sa.Namespace {
		t.Errorf("the Deployment runs as %s/%s, rbac.yaml grants %s/%s",
			dep.Namespace, dep.Spec.Template.Spec.ServiceAccountName, sa.Namespace, sa.Name)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != testimages.MemcachedOperatorRef {
		t.Errorf("operator image %s, want %s", c.Image, testimages.MemcachedOperatorRef)
	}
	if !slices.Contains(c.Args, "--image="+testimages.MemcachedRef) || handler.DefaultImage != testimages.MemcachedRef {
		t.Errorf("memcached image: args %v, default %s, built %s", c.Args, handler.DefaultImage, testimages.MemcachedRef)
	}
	// Flags are parsed in order, so an unknown one fails before --help.
	var out bytes.Buffer
	if err := run(t.Context(), append(slices.Clone(c.Args), "--help"), &out); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("the manifest's arguments %v do not parse: %v", c.Args, err)
	}
}

// readManifest decodes the first YAML document of file into obj.
func readManifest(t *testing.T, file string, obj any) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := utilyaml.NewYAMLOrJSONDecoder(f, 4096).Decode(obj); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}
