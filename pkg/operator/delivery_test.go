package operator_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
	"github.com/handlerkit/handlerkit/pkg/operator"
)

// TestReadyNamesTheDeliveryInUseAndItsFallback: the webhook chooses per pod the first delivery the cluster admits,
// so the exporter's Ready message names how its pods got the agent at start and, for a pod given another delivery
// than --at-start-delivery, that the webhook fell back and what it said (the pod's notes).
func TestReadyNamesTheDeliveryInUseAndItsFallback(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3*time.Minute)
	ns := c.namespace(t, "delivery")
	labels := map[string]string{"app": "orders"}
	c.createPod(t, ns, podSpec{name: "mounted", labels: labels, atStart: atStartRecord("orders")}, "containerd://m1")
	copied := atStartRecord("orders")
	copied.Delivery = atstart.DeliveryInitContainer
	why := "delivery ImageVolume refused by the cluster (ValidatingAdmissionPolicy 'no-image-volumes' denied request); the agent is delivered by InitContainer"
	c.createPod(t, ns, podSpec{name: "copied", labels: labels, atStart: copied, notes: why}, "containerd://c1")
	s := &scripted{name: string(jmxv1alpha1.InjectionExec)}
	s.setAnswer(func(cl call, r inject.Request) (inject.Outcome, error) { return loaded(r, ""), nil })
	c.runOperator(t, ns, operator.Options{Resync: time.Second, AtStartDelivery: atstart.DeliveryImageVolume, ContainerLogs: servingLogs(),
		Strategies: map[jmxv1alpha1.InjectionStrategy]inject.Strategy{jmxv1alpha1.InjectionExec: s}})
	c.createExporter(t, ns, "orders", labels, withMode(jmxv1alpha1.InjectionModeAtStart, false))

	ready := c.waitCondition(t, ns, "orders", jmxv1alpha1.ConditionReady, metav1.ConditionTrue, jmxv1alpha1.ReasonAllInjected)
	for _, w := range []string{"2 pods given the agent at start, by ImageVolume 1 and InitContainer 1",
		"the webhook fell back from ImageVolume (the cluster refuses it) in copied", "no-image-volumes"} {
		if !strings.Contains(ready.Message, w) {
			t.Errorf("Ready message %q lacks %q", ready.Message, w)
		}
	}
}
