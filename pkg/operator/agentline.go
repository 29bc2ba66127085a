package operator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/jvm"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// The verdict of an agent given at start (docs/atstart.md, "How the verdict
// travels"). Such an agent reads its config from the environment and writes
// no status file: the one line it prints on the JVM's stderr at premain is
// its only report. The operator reads the start of the container's log
// (get pods/log, limitBytes), once per container start, again with backoff
// while the line has not appeared, and records the verdict on the pod (the
// ContainerRecord of an at-start container is written only then).

// agentLinePrefix starts the one line the agent prints on the JVM's stderr
// for each load (the agent's Agent.LINE_PREFIX).
const agentLinePrefix = "handlerkit-jmx-agent: "

const (
	// agentLogLimit is how much of the start of a container's log is read
	// (limitBytes): the agent's line comes at premain, right after the
	// JVM's "Picked up JAVA_TOOL_OPTIONS" line.
	agentLogLimit = 32 << 10
	// maxAgentLine bounds a line taken for the agent's: the agent cuts its
	// message at 2,000 characters (at most 6,000 bytes of UTF-8).
	maxAgentLine = 8 << 10
	// maxAgentMessage bounds the message kept from the line.
	maxAgentMessage = 2048
	// agentLineReadTimeout bounds one read of a log.
	agentLineReadTimeout = 10 * time.Second
	// maxAgentLineReads bounds the reads of one container start's log: with
	// agentLineBackoff doubling from 1s up to 8s between them, the line is
	// looked for for 135 s after the first read, and seen at most 8 s after
	// it appears (a JVM on a busy node may take many seconds to start).
	maxAgentLineReads   = 20
	agentLineBackoffMax = 8 * time.Second
)

// LogReader reads the start of a container's current log: at most limit
// bytes from its first byte, fewer when the log is shorter.
type LogReader interface {
	ReadLogHead(ctx context.Context, namespace, pod, container string, limit int64) ([]byte, error)
}

// LogReaderFunc adapts a function to a LogReader.
type LogReaderFunc func(ctx context.Context, namespace, pod, container string, limit int64) ([]byte, error)

// ReadLogHead calls f.
func (f LogReaderFunc) ReadLogHead(ctx context.Context, namespace, pod, container string, limit int64) ([]byte, error) {
	return f(ctx, namespace, pod, container, limit)
}

// podLogs reads logs through the API server (get pods/log).
type podLogs struct{ client kubernetes.Interface }

// ReadLogHead reads the log with limitBytes, and never more than limit
// bytes of the answer whatever the server sends.
func (l podLogs) ReadLogHead(ctx context.Context, namespace, pod, container string, limit int64) ([]byte, error) {
	rc, err := l.client.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, LimitBytes: &limit}).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, limit))
}

// agentLine is what an agent given at start printed: serving, or refused
// with the agent's reason (config-invalid, port-in-use, ...) and message.
type agentLine struct {
	serving bool
	reason  string
	message string
}

// parseAgentLine finds the agent's line in head, the first bytes of a
// container's log, which it treats as untrusted: only a complete line (one
// that ends in a line feed; a carriage return before it is dropped) that
// starts with the agent's prefix, is at most maxAgentLine bytes, and says
// "serving on ..." or "refused: <reason>: <message>" with a reason of
// lower-case letters and dashes counts. The prefix within a line, a line
// cut by the read's limit and anything else are skipped. The first such
// line is the verdict, but a jdk-tool refusal, which is a JDK tool's JVM
// (jcmd, jps, ...) and not the application's, is skipped too. The message
// comes back valid UTF-8, without control characters, at most
// maxAgentMessage bytes.
func parseAgentLine(head []byte) (agentLine, bool) {
	for len(head) > 0 {
		i := bytes.IndexByte(head, '\n')
		if i < 0 {
			return agentLine{}, false // not ended: cut by the limit, or being written
		}
		line := head[:i]
		head = head[i+1:]
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) > maxAgentLine || !bytes.HasPrefix(line, []byte(agentLinePrefix)) {
			continue
		}
		rest := string(line[len(agentLinePrefix):])
		if strings.HasPrefix(rest, "serving on ") {
			return agentLine{serving: true, message: cleanMessage(rest)}, true
		}
		refusal, ok := strings.CutPrefix(rest, "refused: ")
		if !ok {
			continue
		}
		reason, msg, ok := strings.Cut(refusal, ": ")
		if !ok {
			reason, msg = refusal, ""
		}
		if !agentReasonWord(reason) || reason == "jdk-tool" {
			continue
		}
		return agentLine{reason: reason, message: cleanMessage(msg)}, true
	}
	return agentLine{}, false
}

// agentReasonWord says whether s looks like one of the agent's reasons:
// 1 to 40 lower-case letters and dashes, starting with a letter.
func agentReasonWord(s string) bool {
	if s == "" || len(s) > 40 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if (s[i] < 'a' || s[i] > 'z') && s[i] != '-' {
			return false
		}
	}
	return true
}

// cleanMessage makes s fit a condition message and an Event: valid UTF-8,
// control characters as spaces, at most maxAgentMessage bytes (cut at a
// character's boundary).
func cleanMessage(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	s = strings.TrimSpace(s)
	if len(s) <= maxAgentMessage {
		return s
	}
	cut := maxAgentMessage
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// atStartFailureReason is the Failure reason of an agent at start that
// refused to start: the reason live attach gives the same refusal (through
// jvm.AgentRefusalReason and failureReason, the one mapping of the agent's
// reasons), for the reasons whose remedy is the same at start
// (ConfigInvalid, PortInUse, JVMUnsupported, AgentAlreadyPresent), and
// AgentStartFailed for any other (port-not-permitted, internal, a reason of
// a later agent); the message keeps the agent's own words.
func atStartFailureReason(agentReason string) string {
	switch reason, _ := failureReason(jvm.AgentRefusalReason(agentReason)); reason {
	case jmxv1alpha1.ReasonConfigInvalid, jmxv1alpha1.ReasonPortInUse, jmxv1alpha1.ReasonJVMUnsupported, jmxv1alpha1.ReasonAgentAlreadyPresent:
		return reason
	}
	return jmxv1alpha1.ReasonAgentStartFailed
}

// verdictRecord is the record of the container start that want describes
// (an at-start record without a verdict) once its agent printed line: the
// JVM on port when it serves, the refusal as its Failure otherwise.
func verdictRecord(want ContainerRecord, port int32, line agentLine) ContainerRecord {
	c := want
	c.JVMs, c.Failure = nil, nil
	if line.serving {
		c.JVMs = []JVMRecord{{Port: port}}
		return c
	}
	msg := line.message
	if msg == "" {
		msg = "the agent gave no message (" + line.reason + ")"
	}
	c.Failure = &Failure{Reason: atStartFailureReason(line.reason), Message: msg}
	return c
}

// atStartVerdict says whether c records the verdict of the container start
// that want describes: the same start, port, config and generation, serving (JVMs, no
// Failure) or refused (a Failure, no JVMs). A record of an earlier release,
// written before the operator read the agent's line, shows as serving.
func atStartVerdict(c, want ContainerRecord) bool {
	return c.atStart() && c.ContainerID == want.ContainerID && c.Port == want.Port && c.ConfigHash == want.ConfigHash &&
		c.Generation == want.Generation && (len(c.JVMs) > 0 && c.Failure == nil || len(c.JVMs) == 0 && c.Failure != nil)
}

// noteAtStartRefusal notes, for observe, a config the agent given at start
// to pod's container refused (ConfigInvalid with the collector's message),
// as a refusal at attach is noted: ConfigValid turns False and the config
// is kept in status.rejectedConfig, so that no other pod is given it.
func (p *plan) noteAtStartRefusal(pod, container string, c ContainerRecord) {
	if c.atStart() && c.Failure != nil && c.Failure.Reason == jmxv1alpha1.ReasonConfigInvalid && c.ConfigHash == p.configHash {
		p.noteRejected(pod, container, c.Failure.Message)
	}
}

// planAgentLine plans the read of the agent's line of an at-start container
// start that has no verdict yet (want, on port), and reports the container
// as pending meanwhile: it is not serving until its line says so. It
// returns false when no read is due: waiting for the next read, or the
// reads ended without the line.
func (r *Reconciler) planAgentLine(p *plan, pod *corev1.Pod, cs corev1.ContainerStatus, want ContainerRecord, port int32) (task, bool) {
	where := pod.Name + "/" + cs.Name
	st := r.agentLines.state(pod.UID, cs.Name, cs.ContainerID)
	switch {
	case st.verdict != nil:
		// Read, but the record could not be written: written now, not read again.
		p.pending = append(p.pending, where+" (given the agent at start; recording its agent's line)")
		return task{container: cs, atStart: st.verdict, atStartPort: port}, true
	case st.ended != "":
		p.pending = append(p.pending, fmt.Sprintf("%s (given the agent at start; %s; not counted as serving)", where, st.ended))
		return task{}, false
	case st.reads > 0 && time.Until(st.next) > 0:
		p.pending = append(p.pending, fmt.Sprintf("%s (given the agent at start; its agent's line is not in the container's log yet, %d reads: %s)",
			where, st.reads, st.last))
		p.retryIn = minPositive(p.retryIn, time.Until(st.next))
		return task{}, false
	}
	p.pending = append(p.pending, where+" (given the agent at start; reading its agent's line)")
	return task{container: cs, atStart: &want, atStartPort: port}, true
}

// readAgentVerdict reads, once, the start of the log of the container
// start t describes and returns its verdict, or false when the line is not
// there (yet): the read is counted, the next one planned with backoff, and
// after maxAgentLineReads reads, or as soon as a read fills agentLogLimit
// without the line, the container start is reported as "agent line not
// seen" (a log line and an Event) and its log is read no more.
func (r *Reconciler) readAgentVerdict(ctx context.Context, j *job, t task) (ContainerRecord, bool) {
	cs := t.container
	r.agentLines.sweep(ctx, r.podGone)
	rctx, cancel := context.WithTimeout(ctx, agentLineReadTimeout)
	head, err := r.opts.ContainerLogs.ReadLogHead(rctx, j.pod.Namespace, j.pod.Name, cs.Name, agentLogLimit)
	cancel()
	if ctx.Err() != nil {
		return ContainerRecord{}, false // stopping: the next leader reads it
	}
	if len(head) > agentLogLimit {
		head = head[:agentLogLimit]
	}
	if err == nil {
		if line, ok := parseAgentLine(head); ok {
			c := verdictRecord(*t.atStart, t.atStartPort, line)
			r.agentLines.found(j.pod, cs.Name, cs.ContainerID, c)
			return c, true
		}
	}
	var why string
	full := false
	switch {
	case apierrors.IsForbidden(err):
		why = fmt.Sprintf("the operator may not read the container's log (%v): it needs get on pods/log in the namespace (docs/install.md)", err)
	case err != nil:
		why = "reading the container's log failed: " + truncateMsg(err.Error(), 300)
	case len(head) >= agentLogLimit:
		full = true
		why = fmt.Sprintf("no line of the agent in the first %d bytes of the container's log", agentLogLimit)
	default:
		why = fmt.Sprintf("no line of the agent in the container's log (%d bytes)", len(head))
	}
	st := r.agentLines.missed(j.pod, cs.Name, cs.ContainerID, why, full)
	if st.ended != "" {
		msg := fmt.Sprintf("pod %s container %s was given the agent at start, but %s: it is not counted as serving; "+
			"recreate the pod (for example by a rollout) to try again", j.pod.Name, cs.Name, st.ended)
		r.op.Logger().Warnf("operator: %s: %s", j.exporter, msg)
		r.event(j.pod, r.exporterRef(j), corev1.EventTypeWarning, jmxv1alpha1.ReasonAgentLineNotSeen, msg)
	}
	return ContainerRecord{}, false
}

// reportAgentVerdict says what an agent given at start printed: a log
// line, and for a refusal an Event on the pod and the exporter, as live
// attach reports a failed load.
func (r *Reconciler) reportAgentVerdict(j *job, cs corev1.ContainerStatus, c ContainerRecord) {
	target := fmt.Sprintf("pod %s container %s", j.pod.Name, cs.Name)
	if c.Failure == nil {
		r.op.Logger().Infof("operator: %s: the agent given at start to %s serves on port %d", j.exporter, target, c.JVMs[0].Port)
		return
	}
	msg := fmt.Sprintf("the agent given at start to %s refused to start: %s: %s; the JVM runs on without it", target, c.Failure.Reason, c.Failure.Message)
	r.op.Logger().Warnf("operator: %s: %s", j.exporter, msg)
	r.event(j.pod, r.exporterRef(j), corev1.EventTypeWarning, c.Failure.Reason, msg)
}

// podGone says whether the pod with uid is no longer in the pod cache.
func (r *Reconciler) podGone(ctx context.Context, namespace, name string, uid types.UID) bool {
	var pod corev1.Pod
	pod.Namespace, pod.Name = namespace, name
	err := r.read.Get(ctx, &pod, query.FromWatch(watchPods))
	return apierrors.IsNotFound(err) || err == nil && pod.UID != uid
}

// agentLineReads is the operator's memory of the reads of the agents' lines
// of container starts that have no verdict yet, per pod. It is kept in
// memory only: a new leader reads each such start again, as often.
type agentLineReads struct {
	mu        sync.Mutex
	pods      map[types.UID]*podLineReads
	lastSweep time.Time
}

type podLineReads struct {
	namespace, name string
	starts          map[string]lineReads // container/containerID
}

// lineReads is one container start's reads: how many, when the next is
// due and what the last found; ended says why no more are made; verdict is
// a line read whose record is not written yet.
type lineReads struct {
	reads   int
	next    time.Time
	last    string
	ended   string
	verdict *ContainerRecord
}

func newAgentLineReads() *agentLineReads {
	return &agentLineReads{pods: map[types.UID]*podLineReads{}}
}

func (a *agentLineReads) state(uid types.UID, container, id string) lineReads {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.pods[uid]; p != nil {
		return p.starts[container+"/"+id]
	}
	return lineReads{}
}

func (a *agentLineReads) update(pod *corev1.Pod, container, id string, f func(*lineReads)) lineReads {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.pods[pod.UID]
	if p == nil {
		p = &podLineReads{namespace: pod.Namespace, name: pod.Name, starts: map[string]lineReads{}}
		a.pods[pod.UID] = p
	}
	st := p.starts[container+"/"+id]
	f(&st)
	p.starts[container+"/"+id] = st
	return st
}

// found keeps a verdict read until its record is written (forget).
func (a *agentLineReads) found(pod *corev1.Pod, container, id string, c ContainerRecord) {
	a.update(pod, container, id, func(st *lineReads) { st.reads++; st.verdict = &c })
}

// missed counts a read that did not show the line and plans the next one,
// or ends the reads (at the bound, or when final).
func (a *agentLineReads) missed(pod *corev1.Pod, container, id, why string, final bool) lineReads {
	return a.update(pod, container, id, func(st *lineReads) {
		st.reads++
		st.last = why
		switch {
		case final:
			st.ended = "its agent's line was not seen: " + why
		case st.reads >= maxAgentLineReads:
			st.ended = fmt.Sprintf("its agent's line was not seen in %d reads of the container's log over %s (the last: %s)",
				st.reads, agentLineSpan().Round(time.Second), why)
		default:
			st.next = time.Now().Add(agentLineBackoff(st.reads))
		}
	})
}

// forget drops a container start whose verdict is recorded on the pod.
func (a *agentLineReads) forget(uid types.UID, container, id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.pods[uid]; p != nil {
		delete(p.starts, container+"/"+id)
		if len(p.starts) == 0 {
			delete(a.pods, uid)
		}
	}
}

// keepOnly drops the pod's entries of container starts other than the
// current ones: a restarted container's earlier start is read no more.
func (a *agentLineReads) keepOnly(pod *corev1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.pods[pod.UID]
	if p == nil {
		return
	}
	current := map[string]bool{}
	for _, cs := range pod.Status.ContainerStatuses {
		current[cs.Name+"/"+cs.ContainerID] = true
	}
	for k := range p.starts {
		if !current[k] {
			delete(p.starts, k)
		}
	}
	if len(p.starts) == 0 {
		delete(a.pods, pod.UID)
	}
}

// sweep drops, at most once a minute, the pods that gone says are gone.
func (a *agentLineReads) sweep(ctx context.Context, gone func(ctx context.Context, namespace, name string, uid types.UID) bool) {
	a.mu.Lock()
	if time.Since(a.lastSweep) < time.Minute {
		a.mu.Unlock()
		return
	}
	a.lastSweep = time.Now()
	type podKey struct {
		uid             types.UID
		namespace, name string
	}
	var keys []podKey
	for uid, p := range a.pods {
		keys = append(keys, podKey{uid, p.namespace, p.name})
	}
	a.mu.Unlock()
	for _, k := range keys {
		if gone(ctx, k.namespace, k.name, k.uid) {
			a.mu.Lock()
			delete(a.pods, k.uid)
			a.mu.Unlock()
		}
	}
}

// agentLineBackoff is the wait after the reads-th read without the line.
func agentLineBackoff(reads int) time.Duration {
	return min(time.Second<<min(reads-1, 5), agentLineBackoffMax)
}

// agentLineSpan is the time from the first read of a log to the last.
func agentLineSpan() time.Duration {
	var d time.Duration
	for i := 1; i < maxAgentLineReads; i++ {
		d += agentLineBackoff(i)
	}
	return d
}
