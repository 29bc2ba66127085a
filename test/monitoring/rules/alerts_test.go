package rules

// Rule unit tests of the four alerts, the way `promtool test rules` runs
// them and with the same machinery (promqltest.LazyLoader, rules.Manager,
// Group.Eval at every step): the groups are loaded by Prometheus' own rule
// manager from the rules file itself, synthetic series in promqltest's load
// syntax are appended up to each evaluation time, and each alert's state,
// labels and rendered annotations are checked over time.
//
// The synthetic series carry the label sets a Prometheus gets from the
// operator's own monitors: an agent's up from the exporter's PodMonitor
// (namespace, pod, container, instance, job="<namespace>/<exporter>",
// prometheus_jmx_exporter) and the operator's series from its
// ServiceMonitor (namespace, pod, container, endpoint, instance, job and
// service of the operator's <deployment>-metrics Service; the
// per-exporter series' own namespace as exported_namespace). The metric
// names and their own labels are pkg/operator's and pkg/leader's, as
// docs/metrics.md lists them.

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// step is the scrape interval of the synthetic series and the rule
// evaluation interval (kube-prometheus-stack's default for both is 30s).
const step = 30 * time.Second

// The alerts.
const (
	agentDown         = "HandlerkitJmxAgentDown"
	injectionFailures = "HandlerkitInjectionFailures"
	exporterDegraded  = "HandlerkitExporterDegraded"
	operatorNotLead   = "HandlerkitOperatorNotLeading"
)

// Target labels of the operator's replicas, scraped through its
// ServiceMonitor (deploy/operator: Deployment prometheus-jmx-exporter-operator
// in handlerkit-system, container operator, port http-metrics 8383).
const (
	operatorNS   = "handlerkit-system"
	operatorPodA = "prometheus-jmx-exporter-operator-6d4f9b7c5-k8s2p"
	operatorPodB = "prometheus-jmx-exporter-operator-6d4f9b7c5-w7xq4"
	lockName     = "prometheus-jmx-exporter-operator" // --leader-lock's default
)

func operatorTarget(pod, ip string) string {
	return fmt.Sprintf(`container="operator",endpoint="http-metrics",instance="%s:8383",job="prometheus-jmx-exporter-operator-metrics",namespace="%s",pod="%s",service="prometheus-jmx-exporter-operator-metrics"`,
		ip, operatorNS, pod)
}

var (
	replicaA = operatorTarget(operatorPodA, "10.244.0.15")
	replicaB = operatorTarget(operatorPodB, "10.244.0.16")
)

// agentTarget is the target label set of one agent scraped through its
// exporter's PodMonitor.
func agentTarget(namespace, exporter, pod, container, ip string) string {
	return fmt.Sprintf(`container="%s",instance="%s:9404",job="%s/%s",namespace="%s",pod="%s",prometheus_jmx_exporter="%s"`,
		container, ip, namespace, exporter, namespace, pod, exporter)
}

// seg is a stretch of a series: value (a number, "_" for no sample or
// "stale" for a staleness marker) at every step for d.
type seg struct {
	value string
	d     time.Duration
}

// vals is the load syntax of consecutive stretches, one sample a step from 0.
func vals(segs ...seg) string {
	var out []string
	for _, s := range segs {
		for range int(s.d / step) {
			out = append(out, s.value)
		}
	}
	return strings.Join(out, " ")
}

// alertState is one active alert of one evaluation, copied.
type alertState struct {
	state       rules.AlertState
	labels      map[string]string
	annotations map[string]string
	value       float64
}

// timeline is every evaluation's active alerts, by offset from the start
// and alert name.
type timeline map[time.Duration]map[string][]alertState

// evaluate loads series (lines "<series> <values>", one sample a step from
// t=0) and evaluates the rules file's groups with Prometheus' rule manager
// every step from 0 to until.
func evaluate(t *testing.T, series []string, until time.Duration) timeline {
	t.Helper()
	input := "load " + step.String() + "\n"
	for _, s := range series {
		input += "  " + s + "\n"
	}
	ll, err := promqltest.NewLazyLoader(input, promqltest.LazyLoaderOpts{EnableAtModifier: true, EnableNegativeOffset: true})
	if err != nil {
		t.Fatalf("load: %v\n%s", err, input)
	}
	t.Cleanup(func() { _ = ll.Close() })
	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:  rules.EngineQueryFunc(ll.QueryEngine(), ll.Storage()),
		Appendable: ll.Storage(),
		Queryable:  ll.Storage(),
		Context:    context.Background(),
		NotifyFunc: func(context.Context, string, ...*rules.Alert) {},
		Logger:     slog.New(slog.DiscardHandler),
		Parser:     parser.NewParser(parser.Options{}),
	})
	groups, errs := m.LoadGroups(step, labels.EmptyLabels(), "", nil, false, filepath.Join("..", "..", "..", rulesFile))
	if len(errs) > 0 {
		t.Fatalf("Prometheus' rule manager refuses %s: %v", rulesFile, errs)
	}
	if len(groups) != 2 {
		t.Fatalf("%d rule groups, want 2", len(groups))
	}
	for _, g := range groups {
		for _, r := range g.Rules() {
			if ar, ok := r.(*rules.AlertingRule); ok {
				ar.SetRestored(true) // as promtool: write ALERTS and ALERTS_FOR_STATE
			}
		}
	}
	tl := timeline{}
	start := time.Unix(0, 0).UTC()
	for d := time.Duration(0); d <= until; d += step {
		ts := start.Add(d)
		ll.WithSamplesTill(ts, func(err error) {
			if err != nil {
				t.Fatalf("append till %v: %v", d, err)
			}
			for _, g := range groups {
				g.Eval(ll.Context(), ts)
				for _, r := range g.Rules() {
					if err := r.LastError(); err != nil {
						t.Fatalf("%s at %v: %v", r.Name(), d, err)
					}
				}
			}
		})
		tl[d] = map[string][]alertState{}
		for _, g := range groups {
			for _, r := range g.Rules() {
				ar, ok := r.(*rules.AlertingRule)
				if !ok {
					continue
				}
				for _, a := range ar.ActiveAlerts() {
					tl[d][ar.Name()] = append(tl[d][ar.Name()], alertState{
						state: a.State, labels: a.Labels.Map(), annotations: a.Annotations.Map(), value: a.Value,
					})
				}
			}
		}
	}
	return tl
}

// matching are the alerts named alert at d whose labels include sel.
func (tl timeline) matching(t *testing.T, d time.Duration, alert string, sel map[string]string) []alertState {
	t.Helper()
	at, ok := tl[d]
	if !ok {
		t.Fatalf("no evaluation at %v", d)
	}
	var out []alertState
	for _, a := range at[alert] {
		if labelsInclude(a.labels, sel) {
			out = append(out, a)
		}
	}
	return out
}

func labelsInclude(l, sel map[string]string) bool {
	for k, v := range sel {
		if l[k] != v {
			return false
		}
	}
	return true
}

// expect checks that from from to to (both included) the alert selected
// by sel is in state want at every evaluation: StateInactive means no
// active alert matches.
func (tl timeline) expect(t *testing.T, alert string, sel map[string]string, from, to time.Duration, want rules.AlertState) {
	t.Helper()
	for d := from; d <= to; d += step {
		got := tl.matching(t, d, alert, sel)
		switch {
		case want == rules.StateInactive && len(got) > 0:
			t.Errorf("%s %v at %v: %s %v, want inactive", alert, sel, d, got[0].state, got[0].labels)
			return
		case want != rules.StateInactive && len(got) != 1:
			t.Errorf("%s %v at %v: %d alerts, want one %s", alert, sel, d, len(got), want)
			return
		case want != rules.StateInactive && got[0].state != want:
			t.Errorf("%s %v at %v: %s, want %s", alert, sel, d, got[0].state, want)
			return
		}
	}
}

// firing checks the alert selected by sel at d: firing, with exactly the
// labels want, and annotations rendered without template errors whose
// description contains every fragment of desc.
func (tl timeline) firing(t *testing.T, alert string, sel map[string]string, d time.Duration, want map[string]string, desc ...string) alertState {
	t.Helper()
	got := tl.matching(t, d, alert, sel)
	if len(got) != 1 || got[0].state != rules.StateFiring {
		t.Fatalf("%s %v at %v: %v, want one firing alert", alert, sel, d, got)
	}
	a := got[0]
	want = maps.Clone(want)
	want["alertname"] = alert
	if !maps.Equal(a.labels, want) {
		t.Errorf("%s at %v: labels\n %v\nwant\n %v", alert, d, a.labels, want)
	}
	for _, k := range []string{"summary", "description"} {
		v := a.annotations[k]
		if v == "" || strings.Contains(v, "<error expanding template") || strings.Contains(v, "<no value>") {
			t.Errorf("%s at %v: annotation %s %q", alert, d, k, v)
		}
	}
	for _, f := range desc {
		if !strings.Contains(a.annotations["description"], f) {
			t.Errorf("%s at %v: description\n %q\nlacks %q", alert, d, a.annotations["description"], f)
		}
	}
	t.Logf("%s at %v: %v value %.4g\n  summary: %s\n  description: %s", alert, d, a.labels, a.value, a.annotations["summary"], a.annotations["description"])
	return a
}

// never checks that no alert named alert matching sel is active at any
// evaluation up to until.
func (tl timeline) never(t *testing.T, alert string, sel map[string]string, until time.Duration) {
	t.Helper()
	tl.expect(t, alert, sel, 0, until, rules.StateInactive)
}

// TestAgentDownAlert: an agent down for 5 minutes fires with its target's
// labels; it resolves when the agent answers again. An agent down for
// less than 5 minutes stays pending, a target the PodMonitors do not make
// (no prometheus_jmx_exporter) never alerts, and a pod deleted while its
// agent was down (its up goes stale) resolves.
func TestAgentDownAlert(t *testing.T) {
	flaky := agentTarget("shop", "orders", "orders-6b7f9c8d4-x2x9k", "orders", "10.244.1.17")
	blip := agentTarget("shop", "orders", "orders-6b7f9c8d4-p5lmn", "orders", "10.244.1.18")
	gone := agentTarget("shop", "billing", "billing-7c5d8f6b9-qq4rt", "app", "10.244.2.9")
	series := []string{
		// up 0-5m, down 5m-20m, up again 20m-25m.
		"up{" + flaky + "} " + vals(seg{"1", 5 * time.Minute}, seg{"0", 15 * time.Minute}, seg{"1", 5 * time.Minute}),
		// down 2m-6m only: less than the `for`.
		"up{" + blip + "} " + vals(seg{"1", 2 * time.Minute}, seg{"0", 4 * time.Minute}, seg{"1", 19 * time.Minute}),
		// down from 2m, the pod deleted at 9m (stale), so the target is gone.
		"up{" + gone + "} " + vals(seg{"1", 2 * time.Minute}, seg{"0", 7 * time.Minute}, seg{"stale", step}),
		// a down target of another job: not an agent.
		`up{container="kubelet",instance="172.18.0.2:10250",job="kubelet",namespace="kube-system",node="kind-control-plane"} ` +
			vals(seg{"0", 25 * time.Minute}),
	}
	tl := evaluate(t, series, 25*time.Minute)

	sel := map[string]string{"pod": "orders-6b7f9c8d4-x2x9k"}
	tl.expect(t, agentDown, sel, 0, 5*time.Minute-step, rules.StateInactive)
	tl.expect(t, agentDown, sel, 5*time.Minute, 10*time.Minute-step, rules.StatePending)
	tl.expect(t, agentDown, sel, 10*time.Minute, 20*time.Minute-step, rules.StateFiring)
	tl.expect(t, agentDown, sel, 20*time.Minute, 25*time.Minute, rules.StateInactive)
	tl.firing(t, agentDown, sel, 10*time.Minute, map[string]string{
		"severity": "warning", "container": "orders", "instance": "10.244.1.17:9404", "job": "shop/orders",
		"namespace": "shop", "pod": "orders-6b7f9c8d4-x2x9k", "prometheus_jmx_exporter": "orders",
	}, "The agent of exporter orders in pod shop/orders-6b7f9c8d4-x2x9k, container orders (10.244.1.17:9404), has not answered Prometheus for 5 minutes")

	blipSel := map[string]string{"pod": "orders-6b7f9c8d4-p5lmn"}
	tl.expect(t, agentDown, blipSel, 0, 2*time.Minute-step, rules.StateInactive)
	tl.expect(t, agentDown, blipSel, 2*time.Minute, 6*time.Minute-step, rules.StatePending)
	tl.expect(t, agentDown, blipSel, 6*time.Minute, 25*time.Minute, rules.StateInactive)

	goneSel := map[string]string{"prometheus_jmx_exporter": "billing"}
	tl.expect(t, agentDown, goneSel, 2*time.Minute, 7*time.Minute-step, rules.StatePending)
	tl.expect(t, agentDown, goneSel, 7*time.Minute, 9*time.Minute-step, rules.StateFiring)
	tl.expect(t, agentDown, goneSel, 9*time.Minute, 25*time.Minute, rules.StateInactive)

	tl.never(t, agentDown, map[string]string{"job": "kubelet"}, 25*time.Minute)
}

// injections is jmx_operator_injections_total of replica A.
func injections(result, reason, strategy string) string {
	return fmt.Sprintf(`jmx_operator_injections_total{%s,reason="%s",result="%s",strategy="%s"}`, replicaA, reason, result, strategy)
}

// failures is jmx_operator_injection_failures_total of replica A: the
// permanent failures only, by strategy, every enabled strategy's series (and
// its /reconfigure) present at 0 from the operator's start.
func failures(strategy string) string {
	return fmt.Sprintf(`jmx_operator_injection_failures_total{%s,strategy="%s"}`, replicaA, strategy)
}

// TestInjectionFailuresAlert: a permanent failure fires at once (no `for`)
// with the operator's namespace only, the strategies summed, and resolves
// 15 minutes after the last failure. Retries and successes cannot alert:
// jmx_operator_injection_failures_total counts permanent failures only
// (pkg/operator's TestInjectionFailuresMetricStartsAtZero). The labelled
// jmx_operator_injections_total alone (an operator from before
// jmx_operator_injection_failures_total) does not fire it.
func TestInjectionFailuresAlert(t *testing.T) {
	series := []string{
		// one failure before t=0, one at 5m and one (TooManyAttempts) at 10m.
		failures("EphemeralContainer") + " " + vals(seg{"1", 5 * time.Minute}, seg{"2", 5 * time.Minute}, seg{"3", 30 * time.Minute}),
		// one at 6m through Exec.
		failures("Exec") + " " + vals(seg{"0", 6 * time.Minute}, seg{"1", 34 * time.Minute}),
		failures("EphemeralContainer/reconfigure") + " " + vals(seg{"0", 40 * time.Minute}),
		failures("Exec/reconfigure") + " " + vals(seg{"0", 40 * time.Minute}),
		// the same failures by reason, and retries and successes.
		injections("failure", "AttachDisabled", "EphemeralContainer") + " " + vals(seg{"1", 5 * time.Minute}, seg{"2", 35 * time.Minute}),
		injections("failure", "AttachDisabled", "Exec") + " " + vals(seg{"_", 6 * time.Minute}, seg{"1", 34 * time.Minute}),
		injections("failure", "TooManyAttempts", "EphemeralContainer") + " " + vals(seg{"_", 10 * time.Minute}, seg{"1", 30 * time.Minute}),
		injections("retry", "PortInUse", "EphemeralContainer") + " 5+0.5x79",
		injections("retry", "ReconfigureFailed", "EphemeralContainer/reconfigure") + " 0+1x79",
		injections("success", "", "EphemeralContainer") + " 10+1x79",
		injections("success", "NoJVMFound", "EphemeralContainer") + " 2+1x79",
	}
	tl := evaluate(t, series, 40*time.Minute-step)

	op := map[string]string{"namespace": operatorNS}
	tl.expect(t, injectionFailures, op, 0, 5*time.Minute-step, rules.StateInactive)
	tl.expect(t, injectionFailures, op, 5*time.Minute, 24*time.Minute, rules.StateFiring)
	tl.expect(t, injectionFailures, op, 24*time.Minute+step, 40*time.Minute-step, rules.StateInactive)
	want := map[string]string{"severity": "warning", "namespace": operatorNS}
	a := tl.firing(t, injectionFailures, op, 7*time.Minute, want,
		"The operator in namespace handlerkit-system gave up loading the agent 2 times in the last 15 minutes.",
		`jmx_operator_injections_total{result="failure"} by reason says why`, "conditions and Events name the pods")
	if a.value < 2 {
		t.Errorf("%s at 7m: value %v, want the two failures (extrapolated)", injectionFailures, a.value)
	}
	tl.firing(t, injectionFailures, op, 12*time.Minute, want, "gave up loading the agent 3 times in the last 15 minutes.")
	// one alert for the operator: no reason, strategy or pod.
	for d := time.Duration(0); d < 40*time.Minute; d += step {
		if n := len(tl[d][injectionFailures]); n > 1 {
			t.Fatalf("%s at %v: %d alerts, want at most one", injectionFailures, d, n)
		}
	}

	// The labelled counter alone, its failures at 5m, 6m and 10m: no alert.
	tl = evaluate(t, series[4:], 30*time.Minute-step)
	tl.never(t, injectionFailures, map[string]string{}, 30*time.Minute-step)
}

// TestInjectionFailuresAlertFiresForTheFirstFailure: the first permanent
// failure after the operator starts (a new leader, a restart, an upgrade)
// alerts. Its jmx_operator_injections_total{result="failure"} series is
// created by that failure, at 1, and increase() sees nothing in it; the
// alert reads jmx_operator_injection_failures_total, whose series the
// operator creates at 0 for every enabled strategy at start-up. Firing from
// the failure at 5m until its 15-minute window passes it (the last
// evaluation whose window holds the sample before it, 19m), then resolved.
func TestInjectionFailuresAlertFiresForTheFirstFailure(t *testing.T) {
	series := []string{
		failures("EphemeralContainer") + " " + vals(seg{"0", 5 * time.Minute}, seg{"1", 25 * time.Minute}),
		failures("EphemeralContainer/reconfigure") + " " + vals(seg{"0", 30 * time.Minute}),
		// the operator's first failure of this reason and strategy, at 5m.
		injections("failure", "InsufficientMemory", "EphemeralContainer") + " " + vals(seg{"_", 5 * time.Minute}, seg{"1", 25 * time.Minute}),
		injections("success", "", "EphemeralContainer") + " 0+1x59",
	}
	tl := evaluate(t, series, 30*time.Minute-step)
	op := map[string]string{"namespace": operatorNS}
	tl.expect(t, injectionFailures, op, 0, 5*time.Minute-step, rules.StateInactive)
	// the last window holding the sample before the failure ends at 19m.
	tl.expect(t, injectionFailures, op, 5*time.Minute, 19*time.Minute, rules.StateFiring)
	tl.expect(t, injectionFailures, op, 19*time.Minute+step, 30*time.Minute-step, rules.StateInactive)
	tl.firing(t, injectionFailures, op, 5*time.Minute, map[string]string{"severity": "warning", "namespace": operatorNS},
		"gave up loading the agent 1 times in the last 15 minutes.")
}

// condition is jmx_operator_exporter_condition of one exporter as the
// operator's ServiceMonitor scrapes it from replica A.
func condition(namespace, exporter, typ, status, reason string) string {
	return fmt.Sprintf(`jmx_operator_exporter_condition{%s,exported_namespace="%s",exporter="%s",reason="%s",status="%s",type="%s"}`,
		replicaA, namespace, exporter, reason, status, typ)
}

// TestExporterDegradedAlert: Degraded=True for 15 minutes fires with the
// operator's namespace, the exporter's (exported_namespace) and its name (not
// the reason: TestExporterDegradedAlertKeepsItsTimerWhenTheReasonChanges),
// and resolves when Degraded turns False (the operator deletes
// the status="True" series: it goes stale). Degraded=False, Ready=False
// alone, and Degraded=True for less than 15 minutes never fire. Scraped
// without the ServiceMonitor (the exporter's namespace as namespace), the
// description names the exporter the same way.
func TestExporterDegradedAlert(t *testing.T) {
	const total = 35 * time.Minute
	series := []string{
		// orders: Degraded=False 0-5m, True 5m-25m, False again.
		condition("shop", "orders", "Degraded", "False", "AsExpected") + " " + vals(seg{"1", 5 * time.Minute}, seg{"stale", step}, seg{"_", 20*time.Minute - step}, seg{"1", 10 * time.Minute}),
		condition("shop", "orders", "Degraded", "True", "InjectionFailed") + " " + vals(seg{"_", 5 * time.Minute}, seg{"1", 20 * time.Minute}, seg{"stale", step}),
		condition("shop", "orders", "Ready", "False", "InjectionFailed") + " " + vals(seg{"_", 5 * time.Minute}, seg{"1", 20 * time.Minute}, seg{"stale", step}),
		// billing: Degraded=True for 10 minutes only.
		condition("shop", "billing", "Degraded", "True", "JVMEndedAfterInjection") + " " + vals(seg{"_", 5 * time.Minute}, seg{"1", 10 * time.Minute}, seg{"stale", step}),
		// cart: healthy all along; Ready=False while pending.
		condition("shop", "cart", "Degraded", "False", "AsExpected") + " " + vals(seg{"1", total}),
		condition("shop", "cart", "Ready", "False", "InjectionPending") + " " + vals(seg{"1", total}),
		// legacy: scraped by a job of the user's with honor_labels (no
		// exported_namespace: namespace is the exporter's), True from 0.
		`jmx_operator_exporter_condition{instance="10.244.0.15:8383",job="handlerkit-operator",namespace="legacy",exporter="ledger",reason="AgentImageNotAllowed",status="True",type="Degraded"} ` +
			vals(seg{"1", total}),
	}
	tl := evaluate(t, series, total)

	orders := map[string]string{"exporter": "orders"}
	tl.expect(t, exporterDegraded, orders, 0, 5*time.Minute-step, rules.StateInactive)
	tl.expect(t, exporterDegraded, orders, 5*time.Minute, 20*time.Minute-step, rules.StatePending)
	tl.expect(t, exporterDegraded, orders, 20*time.Minute, 25*time.Minute-step, rules.StateFiring)
	tl.expect(t, exporterDegraded, orders, 25*time.Minute, total, rules.StateInactive)
	tl.firing(t, exporterDegraded, orders, 20*time.Minute, map[string]string{
		"severity": "warning", "namespace": operatorNS, "exported_namespace": "shop", "exporter": "orders",
	}, "Exporter shop/orders is Degraded: some of its JVMs have no agent. Its Degraded condition's message says which JVMs and why.")

	billing := map[string]string{"exporter": "billing"}
	tl.expect(t, exporterDegraded, billing, 5*time.Minute, 15*time.Minute-step, rules.StatePending)
	tl.expect(t, exporterDegraded, billing, 15*time.Minute, total, rules.StateInactive)

	tl.never(t, exporterDegraded, map[string]string{"exporter": "cart"}, total)

	ledger := map[string]string{"exporter": "ledger"}
	tl.expect(t, exporterDegraded, ledger, 0, 15*time.Minute-step, rules.StatePending)
	tl.firing(t, exporterDegraded, ledger, 15*time.Minute, map[string]string{
		"severity": "warning", "namespace": "legacy", "exporter": "ledger",
	}, "Exporter legacy/ledger is Degraded: ")
}

// TestExporterDegradedAlertKeepsItsTimerWhenTheReasonChanges: reason is
// not in the alert's labels, so an exporter Degraded without a break alerts
// 15 minutes after it became Degraded whatever its reasons meanwhile:
// orders InjectionFailed for 10 minutes and then JVMEndedAfterInjection,
// billing a new reason every 5 minutes. Both fire at 15m, one alert each.
func TestExporterDegradedAlertKeepsItsTimerWhenTheReasonChanges(t *testing.T) {
	series := []string{
		condition("shop", "orders", "Degraded", "True", "InjectionFailed") + " " + vals(seg{"1", 10 * time.Minute}, seg{"stale", step}),
		condition("shop", "orders", "Degraded", "True", "JVMEndedAfterInjection") + " " + vals(seg{"_", 10 * time.Minute}, seg{"1", 20 * time.Minute}),
		condition("shop", "billing", "Degraded", "True", "InjectionFailed") + " " + vals(seg{"1", 5 * time.Minute}, seg{"stale", step}),
		condition("shop", "billing", "Degraded", "True", "JVMEndedAfterInjection") + " " + vals(seg{"_", 5 * time.Minute}, seg{"1", 5 * time.Minute}, seg{"stale", step}),
		condition("shop", "billing", "Degraded", "True", "AgentImageNotAllowed") + " " + vals(seg{"_", 10 * time.Minute}, seg{"1", 20 * time.Minute}),
	}
	tl := evaluate(t, series, 30*time.Minute-step)
	for _, exporter := range []string{"orders", "billing"} {
		sel := map[string]string{"exporter": exporter}
		tl.expect(t, exporterDegraded, sel, 0, 15*time.Minute-step, rules.StatePending)
		tl.expect(t, exporterDegraded, sel, 15*time.Minute, 30*time.Minute-step, rules.StateFiring)
		tl.firing(t, exporterDegraded, sel, 15*time.Minute, map[string]string{
			"severity": "warning", "namespace": operatorNS, "exported_namespace": "shop", "exporter": exporter,
		}, "Exporter shop/"+exporter+" is Degraded")
	}
}

// leader is leader_election_master_status of a replica.
func leader(replica, name string) string {
	return fmt.Sprintf(`leader_election_master_status{%s,name="%s"}`, replica, name)
}

// TestOperatorNotLeadingAlert: with two replicas scraped (the default
// --metrics-service=every-replica), a leader present never alerts; the
// leader gone for 15 minutes with the other replica at 0 alerts after 5
// with the operator's namespace and lock; a hand-over of a minute stays
// pending. Another operator's lock at 0 is not this alert's.
func TestOperatorNotLeadingAlert(t *testing.T) {
	const total = 35 * time.Minute
	series := []string{
		// A leads 0-10m, then its pod is deleted; B leads from 25m.
		leader(replicaA, lockName) + " " + vals(seg{"1", 10 * time.Minute}, seg{"stale", step}),
		leader(replicaB, lockName) + " " + vals(seg{"0", 25 * time.Minute}, seg{"1", 10 * time.Minute}),
		// the chart's install: lock <release>-prometheus-jmx-exporter-operator,
		// a hand-over of one minute at 10m.
		leader(operatorTarget("kps-prometheus-jmx-exporter-operator-5b6c-aaaaa", "10.244.3.4"), "kps-prometheus-jmx-exporter-operator") + " " +
			vals(seg{"1", 10 * time.Minute}, seg{"stale", step}),
		leader(operatorTarget("kps-prometheus-jmx-exporter-operator-5b6c-bbbbb", "10.244.3.5"), "kps-prometheus-jmx-exporter-operator") + " " +
			vals(seg{"0", 11 * time.Minute}, seg{"1", 24 * time.Minute}),
		// another operator's lock, never leading here.
		leader(operatorTarget("other-operator-7f8d-ccccc", "10.244.3.6"), "other-operator") + " " + vals(seg{"0", total}),
	}
	tl := evaluate(t, series, total)

	sel := map[string]string{"name": lockName}
	tl.expect(t, operatorNotLead, sel, 0, 10*time.Minute-step, rules.StateInactive)
	tl.expect(t, operatorNotLead, sel, 10*time.Minute, 15*time.Minute-step, rules.StatePending)
	tl.expect(t, operatorNotLead, sel, 15*time.Minute, 25*time.Minute-step, rules.StateFiring)
	tl.expect(t, operatorNotLead, sel, 25*time.Minute, total, rules.StateInactive)
	tl.firing(t, operatorNotLead, sel, 15*time.Minute, map[string]string{
		"severity": "critical", "namespace": operatorNS, "name": lockName,
	}, "(lock prometheus-jmx-exporter-operator in namespace handlerkit-system;")

	chart := map[string]string{"name": "kps-prometheus-jmx-exporter-operator"}
	tl.expect(t, operatorNotLead, chart, 10*time.Minute, 11*time.Minute-step, rules.StatePending)
	tl.expect(t, operatorNotLead, chart, 11*time.Minute, total, rules.StateInactive)
	tl.never(t, operatorNotLead, map[string]string{"name": "other-operator"}, total)
	// operator series exist throughout: the absent() path stays quiet.
	for d := time.Duration(0); d <= total; d += step {
		for _, a := range tl[d][operatorNotLead] {
			if _, ok := a.labels["name"]; !ok {
				t.Errorf("%s at %v: the absent() alert %v while replicas are scraped", operatorNotLead, d, a.labels)
			}
		}
	}
}

// TestOperatorNotLeadingAlertWhenNoReplicaIsScraped: the absent() path. No
// series of the operator's lock at all (not installed, not scraped, or
// --metrics-service=leader with no leader) fires after 5 minutes with no
// namespace or name, the description rendering them empty; the operator
// scraped again (here its leader, in leader mode) resolves it, and series
// that appear within 5 minutes leave it pending.
func TestOperatorNotLeadingAlertWhenNoReplicaIsScraped(t *testing.T) {
	series := []string{
		// nothing of the operator for 12 minutes, then its leader only.
		leader(replicaA, lockName) + " " + vals(seg{"_", 12 * time.Minute}, seg{"1", 8 * time.Minute}),
		// another operator's lock does not count as the operator's.
		leader(operatorTarget("other-operator-7f8d-ccccc", "10.244.3.6"), "other-operator") + " " + vals(seg{"1", 20 * time.Minute}),
	}
	tl := evaluate(t, series, 20*time.Minute-step)
	all := map[string]string{}
	tl.expect(t, operatorNotLead, all, 0, 5*time.Minute-step, rules.StatePending)
	tl.expect(t, operatorNotLead, all, 5*time.Minute, 12*time.Minute-step, rules.StateFiring)
	tl.expect(t, operatorNotLead, all, 12*time.Minute, 20*time.Minute-step, rules.StateInactive)
	tl.firing(t, operatorNotLead, all, 5*time.Minute, map[string]string{"severity": "critical"},
		"No replica of the operator (lock  in namespace ; empty when no replica is scraped at all) has held the leadership for 5 minutes")

	// Series within the `for`: pending, never firing.
	tl = evaluate(t, []string{leader(replicaA, lockName) + " " + vals(seg{"_", 3 * time.Minute}, seg{"0", 2 * time.Minute}, seg{"1", 10 * time.Minute})}, 15*time.Minute-step)
	tl.expect(t, operatorNotLead, all, 0, 5*time.Minute-step, rules.StatePending)
	tl.expect(t, operatorNotLead, all, 5*time.Minute, 15*time.Minute-step, rules.StateInactive)
}
