// Command scrapeconfig prints the prometheus.yml that Prometheus Operator
// itself generates for PodMonitors and ServiceMonitors: it selects them with
// the operator's own ResourceSelector (which rejects what the operator would
// reject, and says why) and renders them with its ConfigGenerator, as the
// operator does for a Prometheus resource that selects every monitor of its
// namespace. test/e2e loads the output into a real Prometheus, so that the
// relabeling of the PodMonitors the PrometheusJmxExporter operator writes is
// proven by Prometheus, not by a hand translation.
//
// In a cluster, prometheus-config-reloader writes the generated file out for
// Prometheus with the environment variables it references, $(SHARD) and
// $(POD_NAME), replaced by the StatefulSet pod's values; this command does the
// same with -shard and -pod-name, matching $(VAR) as the reloader does.
//
// Usage:
//
//	scrapeconfig [-version v3.16.0] [-scrape-interval 2s] [-shard 0] [-pod-name prometheus-e2e-0] [-selector release=kps] < monitors.yaml
//
// -selector gives the Prometheus resource kube-prometheus-stack's default
// podMonitorSelector and serviceMonitorSelector: matchLabels of the given
// k=v pairs. Without it, the Prometheus selects every monitor.
//
// The input is YAML documents of kind PodMonitor or ServiceMonitor, all in
// one namespace (the Prometheus resource lives there and selects its own
// namespace only). Exit status 1 names a rejected monitor or a failure.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"sort"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus-operator/prometheus-operator/pkg/assets"
	"github.com/prometheus-operator/prometheus-operator/pkg/operator"
	prompkg "github.com/prometheus-operator/prometheus-operator/pkg/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/cache"
	sigsyaml "sigs.k8s.io/yaml"
)

func main() {
	version := flag.String("version", "v3.16.0", "the Prometheus version the configuration is for (spec.version of the Prometheus resource)")
	interval := flag.String("scrape-interval", "30s", "spec.scrapeInterval and spec.evaluationInterval of the Prometheus resource")
	shard := flag.String("shard", "0", "the value of $(SHARD): the shard this Prometheus is")
	pod := flag.String("pod-name", "prometheus-e2e-0", "the value of $(POD_NAME): the Prometheus pod's name")
	selector := flag.String("selector", "", "k=v,... : the Prometheus' podMonitorSelector and serviceMonitorSelector matchLabels, as kube-prometheus-stack sets them (default: every monitor)")
	flag.Parse()
	sel, err := labels.ConvertSelectorToLabelsMap(*selector)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scrapeconfig: -selector:", err)
		os.Exit(2)
	}
	out, err := generate(context.Background(), os.Stdin, *version, *interval, sel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scrapeconfig:", err)
		os.Exit(1)
	}
	os.Stdout.Write(expandEnv(out, map[string]string{"SHARD": *shard, "POD_NAME": *pod}))
}

// envRef is how the reloader finds a variable reference, $(VAR).
var envRef = regexp.MustCompile(`\$\(([a-zA-Z_0-9]+)\)`)

// expandEnv replaces every $(VAR) of vars in b; references to other
// variables stay as they are, as the reloader leaves them when it tolerates
// expansion errors (Prometheus Operator runs it that way).
func expandEnv(b []byte, vars map[string]string) []byte {
	return envRef.ReplaceAllFunc(b, func(ref []byte) []byte {
		if v, ok := vars[string(ref[2:len(ref)-1])]; ok {
			return []byte(v)
		}
		return ref
	})
}

// monitors are the decoded input.
type monitors struct {
	namespace string
	pods      []*monitoringv1.PodMonitor
	services  []*monitoringv1.ServiceMonitor
}

// read decodes the YAML documents of r.
func read(r io.Reader) (*monitors, error) {
	m := &monitors{}
	docs := yaml.NewYAMLReader(bufio.NewReader(r))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var meta metav1.TypeMeta
		if err := sigsyaml.Unmarshal(doc, &meta); err != nil {
			return nil, err
		}
		var obj metav1.Object
		switch meta.Kind {
		case monitoringv1.PodMonitorsKind:
			pm := &monitoringv1.PodMonitor{}
			if err := sigsyaml.UnmarshalStrict(doc, pm); err != nil {
				return nil, fmt.Errorf("PodMonitor: %w", err)
			}
			m.pods, obj = append(m.pods, pm), pm
		case monitoringv1.ServiceMonitorsKind:
			sm := &monitoringv1.ServiceMonitor{}
			if err := sigsyaml.UnmarshalStrict(doc, sm); err != nil {
				return nil, fmt.Errorf("ServiceMonitor: %w", err)
			}
			m.services, obj = append(m.services, sm), sm
		default:
			return nil, fmt.Errorf("a %q document; want PodMonitor or ServiceMonitor", meta.Kind)
		}
		if m.namespace == "" {
			m.namespace = obj.GetNamespace()
		}
		if obj.GetNamespace() == "" || obj.GetNamespace() != m.namespace {
			return nil, fmt.Errorf("%s %s is in namespace %q; every monitor must be in one namespace (%q)", meta.Kind, obj.GetName(), obj.GetNamespace(), m.namespace)
		}
	}
	if m.namespace == "" {
		return nil, errors.New("no PodMonitor or ServiceMonitor in the input")
	}
	return m, nil
}

// generate selects and renders the monitors of r for a Prometheus resource
// of version that selects the monitors of their namespace with matchLabels
// match (every one when match is empty).
func generate(ctx context.Context, r io.Reader, version, interval string, match map[string]string) ([]byte, error) {
	m, err := read(r)
	if err != nil {
		return nil, err
	}
	p := &monitoringv1.Prometheus{
		TypeMeta:   metav1.TypeMeta{APIVersion: monitoringv1.SchemeGroupVersion.String(), Kind: monitoringv1.PrometheusesKind},
		ObjectMeta: metav1.ObjectMeta{Name: "e2e", Namespace: m.namespace},
		Spec: monitoringv1.PrometheusSpec{
			CommonPrometheusFields: monitoringv1.CommonPrometheusFields{
				Version:                version,
				ScrapeInterval:         monitoringv1.Duration(interval),
				PodMonitorSelector:     &metav1.LabelSelector{MatchLabels: match},
				ServiceMonitorSelector: &metav1.LabelSelector{MatchLabels: match},
			},
			EvaluationInterval: monitoringv1.Duration(interval),
		},
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	store := assets.NewTestStoreBuilder()
	rs, err := prompkg.NewResourceSelector(logger, p, store, nil, operator.NewMetrics(prometheus.NewRegistry()),
		operator.NewFakeRecorder(100, p))
	if err != nil {
		return nil, err
	}
	podSel, err := rs.SelectPodMonitors(ctx, listFn(m.pods))
	if err != nil {
		return nil, err
	}
	svcSel, err := rs.SelectServiceMonitors(ctx, listFn(m.services))
	if err != nil {
		return nil, err
	}
	if err := rejected(podSel, svcSel); err != nil {
		return nil, err
	}
	cg, err := prompkg.NewConfigGenerator(logger, p, prompkg.WithEndpointSliceSupport())
	if err != nil {
		return nil, err
	}
	return cg.GenerateServerConfiguration(p, svcSel.ValidResources(), podSel.ValidResources(), nil, nil, store, nil, nil, nil, nil)
}

// listFn lists objs as the operator's informers would, by namespace and
// label selector.
func listFn[T metav1.Object](objs []T) prompkg.ListAllByNamespaceFn {
	return func(namespace string, selector labels.Selector, appendFn cache.AppendFunc) error {
		for _, o := range objs {
			if o.GetNamespace() == namespace && selector.Matches(labels.Set(o.GetLabels())) {
				appendFn(o)
			}
		}
		return nil
	}
}

// rejected names the monitors the operator's selection refused.
func rejected(pods operator.TypedResourcesSelection[*monitoringv1.PodMonitor], services operator.TypedResourcesSelection[*monitoringv1.ServiceMonitor]) error {
	var msgs []string
	for key, res := range pods {
		for _, c := range res.Conditions() {
			if c.Status != monitoringv1.ConditionTrue {
				msgs = append(msgs, "PodMonitor "+key+": "+c.Message)
			}
		}
	}
	for key, res := range services {
		for _, c := range res.Conditions() {
			if c.Status != monitoringv1.ConditionTrue {
				msgs = append(msgs, "ServiceMonitor "+key+": "+c.Message)
			}
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	sort.Strings(msgs)
	return fmt.Errorf("Prometheus Operator rejects %d monitors: %v", len(msgs), msgs)
}
