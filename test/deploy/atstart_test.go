package deploy

import (
	"reflect"
	"strings"
	"testing"

	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
)

// TestAtStartRBACIsTheCheckersRules: every install with the webhook grants, where the operator serves, exactly
// atstart.PolicyRules (the webhook's dry runs and the LimitRanges; pkg/webhook's tests run the Checker under
// these rules alone): a Role in the namespaced installs, a ClusterRole in the cluster-wide ones.
func TestAtStartRBACIsTheCheckersRules(t *testing.T) {
	const name = "prometheus-jmx-exporter-operator-atstart"
	for _, dir := range operatorInstalls {
		objs := build(t, dir)
		got := rulesOf(t, objs, "Role")
		for k, v := range rulesOf(t, objs, "ClusterRole") {
			got[k] = v
		}
		var rules []any
		for k, v := range got {
			if k == name || strings.HasSuffix(k, "/"+name) {
				rules = append(rules, v)
				if !reflect.DeepEqual(v, atstart.PolicyRules()) {
					t.Errorf("%s: %s rules\n%v\nwant atstart.PolicyRules\n%v", dir, k, v, atstart.PolicyRules())
				}
			}
		}
		if len(rules) != 1 {
			t.Errorf("%s: %d %s Roles or ClusterRoles, want 1", dir, len(rules), name)
		}
	}
}
