package v1alpha1_test

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
)

// An exporter for every pod labelled app=orders, with the defaults the
// operator acts on filled in.
func ExamplePrometheusJmxExporterSpec_Defaulted() {
	exporter := jmxv1alpha1.PrometheusJmxExporter{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop"},
		Spec: jmxv1alpha1.PrometheusJmxExporterSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "orders"}},
		},
	}
	spec := exporter.Spec.Defaulted()
	fmt.Println(spec.Port, spec.Injection.Strategy)
	fmt.Println(spec.Agent.Image)
	fmt.Println(spec.Config == nil)
	// Output:
	// 9404 EphemeralContainer
	// ghcr.io/handlerkit/jmx-agent:v0.2.0
	// true
}
