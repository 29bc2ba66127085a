package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/images/testimages"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/jvm/jvmtest"
)

// threadDumpLine starts the thread dump a HotSpot JVM prints on its stdout
// for each SIGQUIT once its attach listener is not being started.
const threadDumpLine = "Full thread dump "

// corpusConfigMap is a ConfigMap with the config under config.yaml: in data
// when it is UTF-8, in binaryData when it is not (the operator reads both).
func corpusConfigMap(name string, config []byte) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if utf8.Valid(config) {
		cm.Data = map[string]string{"config.yaml": string(config)}
	} else {
		cm.BinaryData = map[string][]byte{"config.yaml": config}
	}
	return cm
}

// jvmAnswers returns nil when the pod's JVM is the one that started the test
// and answers: its container runs, never restarted and has the container ID
// it had at first, and the JVM prints a thread dump for a SIGQUIT (its
// signal dispatcher and VM thread work), the dumps-th of its life. It returns
// an error, rather than failing, so that the test can show it failing on a
// killed JVM.
func jvmAnswers(t *testing.T, ns, name, containerID string, dumps int) error {
	t.Helper()
	pod, err := kube.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(pod.Status.ContainerStatuses) == 0 {
		return fmt.Errorf("pod %s has no container status", name)
	}
	cs := pod.Status.ContainerStatuses[0]
	if cs.State.Running == nil || cs.RestartCount != 0 || cs.ContainerID != containerID {
		return fmt.Errorf("pod %s: the JVM's container is %+v, restarted %d times, ID %s (want running, never restarted, %s)",
			name, cs.State, cs.RestartCount, cs.ContainerID, containerID)
	}
	if _, stderr, err := execIn(t, ns, name, "app", []string{"/bin/sh", "-c", quitOnceCaught}); err != nil {
		return fmt.Errorf("pod %s: SIGQUIT to the JVM: %v %s", name, err, stderr)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		logs, err := kube.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: "app"}).Do(t.Context()).Raw()
		if err != nil {
			return err
		}
		n := strings.Count(string(logs), threadDumpLine)
		if n == dumps {
			return nil
		}
		if n > dumps || time.Now().After(deadline) {
			return fmt.Errorf("pod %s: the JVM printed %d thread dumps, want %d", name, n, dumps)
		}
		select {
		case <-t.Context().Done():
			return t.Context().Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// quitOnceCaught sends SIGQUIT to the container's pid 1 once it catches
// SIGQUIT (bit 3 of SigCgt in /proc/1/status), waiting up to a minute: a JVM
// is signalled before HotSpot installed its handler when its container has
// only just shown as running, and the signal's default action then ends it
// (a warm run failed so: "after the pod started: the JVM printed 0 thread
// dumps, want 1"). jmx-attach waits for the handler in the same way
// (pkg/jvm, ReasonSignalNotHandled).
const quitOnceCaught = `n=0
while :; do
  m=
  while read -r k v; do [ "$k" = SigCgt: ] && m=$v; done < /proc/1/status
  [ -n "$m" ] && [ $(( 0x${m#"${m%?}"} & 4 )) -ne 0 ] && break
  n=$((n+1))
  [ "$n" -lt 600 ] || { echo "pid 1 does not catch SIGQUIT after a minute (SigCgt $m)" >&2; exit 3; }
  sleep 0.1
done
kill -QUIT 1`

// setConfigMap points the exporter at the ConfigMap cm with a merge patch
// (the operator writes the status meanwhile) and returns the new generation.
func setConfigMap(t *testing.T, ns, name, cm string) int64 {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"config": map[string]any{"configMapName": cm}}})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := jmx.JmxV1alpha1().PrometheusJmxExporters(ns).Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ex.Generation
}

// TestCorpusThroughTheOperator runs the corpus of bad and unsupported configs
// (jvmtest.Corpus, which cmd/jmx-attach's TestCorpusOfBadConfigsNeverHarmsAJVM
// runs through jmx-attach) through the operator on the real node, against
// JDK 17 and Temurin 25 JVM pods at once: two pods of each JDK, each with an
// exporter of its own and half of the cases. Each case is a ConfigMap of its
// own that the exporter is pointed at (a new generation, so that the status
// that answers it is told apart): the exporter reports ConfigValid=False
// with a non-empty message and a named reason, either from the Go prefilter
// ("no agent was touched": no agent line, no ephemeral container) or from
// the agent (status.rejectedConfig for that config's sha256, one more
// ephemeral container and one more agent line "refused: <a reason the case
// allows>"); and after each the JVM is the one that started, never
// restarted, and answers a SIGQUIT with a thread dump. The size case does
// not fit a ConfigMap (the apiserver's 1 MiB limit, which refuses it); its
// cut to one byte over the operator's own limit (inject.MaxConfigBytes) is
// run instead, and must give ConfigTooLarge. On each JDK, some case must
// reach the agent. A valid config then makes the first pod of each JDK serve
// (the endpoint in the status, /metrics scraped, exactly one serving agent
// line). Last, that JVM is ended (SIGTERM) and the alive check is shown to
// fail on it.
func TestCorpusThroughTheOperator(t *testing.T) {
	t.Parallel()
	needImage(t, testimages.Temurin25JVMRef, testimages.BuildTemurin25JVM)
	corpus := jvmtest.Corpus()
	if len(corpus) < 25 {
		t.Fatalf("the corpus has %d cases, the issue asks for at least 25", len(corpus))
	}
	ns := newNamespace(t, "e2e-corpus", nil)
	// Each config the agent refuses costs the pod one ephemeral container of
	// its budget, so the budget is raised; --max-attempts stays at its
	// default (5): it bounds the attempts of one request (one config, one
	// generation) on a container start, and every case here is a new one.
	budget := len(corpus) + 8
	deployOperator(t, ns, withArgs(fmt.Sprintf("--ephemeral-container-budget=%d", budget)))
	jdks := []struct{ name, image, java string }{
		{"jdk17", testimages.JVMAppRef, testimages.JavaHome + "/bin/java"},
		{"temurin25", testimages.Temurin25JVMRef, testimages.Temurin25Home + "/bin/java"},
	}
	// Each JDK runs the corpus on two pods at once, the even cases on one
	// and the odd ones on the other (each pod with an exporter of its own),
	// so that the longest test of the suite takes half as long; the valid
	// config and the end of the JVM run on the first pod of each.
	var subtests []subtest
	var mu sync.Mutex
	byAgent := map[string]int{}
	for _, jdk := range jdks {
		for half, suffix := range []string{"even", "odd"} {
			name := jdk.name + "-" + suffix
			var cases []int
			for i := half; i < len(corpus); i += 2 {
				cases = append(cases, i)
			}
			createPod(t, ns, jvmPod(name, map[string]string{"app": name}, jdk.image))
			subtests = append(subtests, subtest{name, func(t *testing.T) {
				n := corpusThroughTheOperator(t, ns, name, jdk.java, corpus, cases, half == 0)
				mu.Lock()
				byAgent[jdk.name] += n
				mu.Unlock()
			}})
		}
	}
	runTogether(t, subtests...)
	for _, jdk := range jdks {
		if byAgent[jdk.name] == 0 {
			t.Errorf("%s: no case reached the agent: the JVM side of the corpus was not run", jdk.name)
		}
	}
}

// corpusThroughTheOperator is TestCorpusThroughTheOperator for one JVM pod,
// name, whose JVM is java, and the cases of corpus at the indexes cases; it
// returns how many of them the agent refused. With last, it then gives the
// JVM a valid config and ends it.
func corpusThroughTheOperator(t *testing.T, ns, name, java string, corpus []jvmtest.CorpusCase, cases []int, last bool) int {
	start := time.Now()
	ctx := t.Context()
	pod := waitRunning(t, ns, name)
	if exe := shell(t, ns, name, "readlink /proc/1/exe"); exe != java {
		t.Fatalf("the pod's JVM is %q, want %q", exe, java)
	}
	containerID := pod.Status.ContainerStatuses[0].ContainerID
	dumps := 0
	answers := func(after string) {
		t.Helper()
		dumps++
		if err := jvmAnswers(t, ns, name, containerID, dumps); err != nil {
			t.Fatalf("after %s: %v", after, err)
		}
	}
	answers("the pod started")
	loads, ephemeral := 0, 0
	byPrefilter, byAgent := []string{}, []string{}
	reasons := map[string]int{}
	for k, i := range cases {
		tc := corpus[i]
		config := tc.Config
		cmName := fmt.Sprintf("%s-case-%02d", name, i)
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, corpusConfigMap(cmName, config), metav1.CreateOptions{}); err != nil {
			if !apierrors.IsInvalid(err) || len(config) <= 1<<20 {
				t.Fatalf("%s: ConfigMap: %v", tc.Name, err)
			}
			// The apiserver refuses a ConfigMap over 1 MiB; the
			// operator's own limit is smaller: one byte over it.
			t.Logf("%-42s refused by the apiserver (%s); run cut to %d bytes instead", tc.Name, apierrors.ReasonForError(err), inject.MaxConfigBytes+1)
			config = config[:inject.MaxConfigBytes+1]
			if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, corpusConfigMap(cmName, config), metav1.CreateOptions{}); err != nil {
				t.Fatalf("%s: ConfigMap: %v", tc.Name, err)
			}
		}
		var gen int64
		if k == 0 {
			createExporter(t, ns, exporter(name, map[string]string{"app": name}, withConfig(cmName)))
			gen = getExporter(t, ns, name).Generation
		} else {
			gen = setConfigMap(t, ns, name, cmName)
		}
		sum := sha256Hex(string(config))
		var got *jmxv1alpha1.PrometheusJmxExporter
		var agent bool
		waitFor(t, 3*time.Minute, fmt.Sprintf("case %d (%s) refused", i, tc.Name), func() (bool, string) {
			got = getExporter(t, ns, name)
			c := findCond(got.Status.Conditions, jmxv1alpha1.ConditionConfigValid)
			state := fmt.Sprintf("generation %d observed %d, ConfigValid %s/%s: %.200s", gen, got.Status.ObservedGeneration, c.Status, c.Reason, c.Message)
			if got.Status.ObservedGeneration < gen || c.Status != metav1.ConditionFalse {
				return false, state
			}
			if rc := got.Status.RejectedConfig; rc != nil && rc.ConfigSHA256 == sum {
				agent = true
				return true, state
			}
			return strings.Contains(c.Message, "no agent was touched"), state
		})
		c := findCond(got.Status.Conditions, jmxv1alpha1.ConditionConfigValid)
		if c.Message == "" || c.Reason == "" {
			t.Errorf("%s: ConfigValid=False without a reason or message: %+v", tc.Name, c)
		}
		p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n, lines := agentLoads(t, ns, name, "app")
		if agent {
			// The agent compiled it in the JVM and refused it.
			loads++
			ephemeral++
			rc := got.Status.RejectedConfig
			ok := false
			if n == loads {
				for _, r := range tc.Reasons {
					ok = ok || strings.Contains(lines[n-1], "refused: "+r+": ")
				}
			}
			if !ok || c.Reason != jmxv1alpha1.ReasonConfigInvalid || rc.Message == "" || !strings.Contains(c.Message, rc.Message) {
				t.Errorf("%s: refused by the agent: ConfigValid %s %q, agent lines %q; want %s with the agent's message %q and %d lines, the last refused with one of %v",
					tc.Name, c.Reason, c.Message, lines, jmxv1alpha1.ReasonConfigInvalid, rc.Message, loads, tc.Reasons)
			}
			byAgent = append(byAgent, tc.Name)
			reasons["agent "+c.Reason]++
			t.Logf("%-42s agent %s: %.160s", tc.Name, c.Reason, rc.Message)
		} else {
			// The Go prefilter refused it: nothing reached the pod.
			want := []string{jmxv1alpha1.ReasonConfigInvalid}
			if len(config) > inject.MaxConfigBytes {
				want = []string{jmxv1alpha1.ReasonConfigTooLarge}
			}
			if !slices.Contains(want, c.Reason) || n != loads {
				t.Errorf("%s: refused before any attach: ConfigValid %s %q, %d agent lines (%q); want %v and %d lines",
					tc.Name, c.Reason, c.Message, n, lines, want, loads)
			}
			byPrefilter = append(byPrefilter, tc.Name)
			reasons["prefilter "+c.Reason]++
			t.Logf("%-42s prefilter %s: %.160s", tc.Name, c.Reason, c.Message)
		}
		if len(p.Spec.EphemeralContainers) != ephemeral {
			t.Errorf("%s: %d ephemeral containers, want %d", tc.Name, len(p.Spec.EphemeralContainers), ephemeral)
		}
		answers(tc.Name)
	}
	t.Logf("%s: %d cases in %s: %d refused by the Go prefilter before any attach (%s), %d by the agent in the JVM; reasons %v",
		name, len(cases), time.Since(start).Round(time.Second), len(byPrefilter), strings.Join(byPrefilter, ", "), len(byAgent), reasons)
	if !last {
		return len(byAgent)
	}

	// A valid config: the JVM serves.
	good := "rules:\n- pattern: \".*\"\n"
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(name+"-good", good), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	setConfigMap(t, ns, name, name+"-good")
	checkInjected(t, ns, name, name, jmxv1alpha1.DefaultPort)
	waitCondition(t, ns, name, jmxv1alpha1.ConditionConfigValid, metav1.ConditionTrue, jmxv1alpha1.ReasonConfigLoaded, time.Minute)
	n, lines := agentLoads(t, ns, name, "app")
	if n != loads+1 || !strings.Contains(lines[n-1], "serving on :") || strings.Count(strings.Join(lines, "\n"), "serving on :") != 1 {
		t.Errorf("agent lines %q, want %d, the last and only one serving", lines, loads+1)
	}
	answers("the valid config")
	t.Logf("%s: corpus and valid config through the operator in %s, %d ephemeral containers", name, time.Since(start).Round(time.Second), ephemeral+1)

	// The alive check fails on a JVM that ended: SIGTERM, the container
	// restarts.
	if _, stderr, err := execIn(t, ns, name, "app", []string{"/bin/sh", "-c", "kill -TERM 1"}); err != nil {
		t.Logf("kill -TERM 1: %v %s", err, stderr) // the session may end with the container
	}
	waitFor(t, 2*time.Minute, name+"'s JVM ended", func() (bool, string) {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cs := p.Status.ContainerStatuses[0]
		return cs.RestartCount > 0 || cs.State.Running == nil, fmt.Sprintf("%+v", cs.State)
	})
	if err := jvmAnswers(t, ns, name, containerID, dumps+1); err == nil {
		t.Error("the alive check passes on a JVM that was ended")
	} else {
		t.Logf("the alive check on the ended JVM fails, as it must: %v", err)
	}
	return len(byAgent)
}
