package atstart

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// AnnotationProbe marks the pod of the Checker's last dry run: the pod as it was submitted, without the agent, to
// tell a refusal of the agent from a refusal of the pod itself. A handler leaves a dry-run request whose pod
// carries it as it is (no patch, no dry run of its own), which ends the recursion: the API server sends the dry run
// to this same webhook.
const AnnotationProbe = "jmx.handlerkit.dev/admission-probe"

// Defaults of CheckerOptions.
const (
	// DefaultDryRunTimeout bounds one dry run; each is cut shorter to answer before the webhook's own deadline
	// (4/5 of its timeoutSeconds, 5 s in the manifests). A dry run that times out ends the checks (the pod is
	// created without the agent), and a refusal comes back at once, so the first dry run may take most of the
	// time: a nested call of this webhook (the dry run reaches it again) on a loaded API server took over 1.2 s
	// (make test, the CA rotation test).
	DefaultDryRunTimeout = 3 * time.Second
	// DefaultVerdictTTL is how long a namespace's refusal of a delivery, and its LimitRanges, are remembered.
	DefaultVerdictTTL = time.Minute
	// DefaultMaxVerdicts bounds each of the Checker's memories (refusals, LimitRanges): entries, not bytes.
	DefaultMaxVerdicts = 1024
	// unavailableTTL is how long a dry run that could not be made (forbidden, timed out) is remembered: shorter,
	// since it says nothing of what the cluster admits.
	unavailableTTL = 10 * time.Second
	// fieldManager names the Checker's dry runs in the API server's audit log.
	fieldManager = "handlerkit-atstart-dry-run"
)

// CheckerOptions configures a Checker. Client is required.
type CheckerOptions struct {
	// Client makes the dry runs (create pods, dryRun All) and lists the LimitRanges of the pods' namespaces.
	Client kubernetes.Interface
	// Timeout bounds one dry run (and one LimitRange list); it is cut shorter to answer before the request's
	// context ends. Default: DefaultDryRunTimeout.
	Timeout time.Duration
	// TTL is how long a refusal is remembered per namespace and delivery, so that a burst of creations does not
	// dry-run a delivery the namespace refuses for every pod. Default: DefaultVerdictTTL.
	TTL time.Duration
	// MaxEntries bounds each memory; the entry nearest its end goes first. Default: DefaultMaxVerdicts.
	MaxEntries int
	// Logger logs each fallback and each dry run that could not be made. Default: logrus.StandardLogger().
	Logger logrus.FieldLogger

	now func() time.Time
}

// Checker makes sure the webhook never returns a patch the cluster would refuse: before the webhook answers, it
// creates the patched pod with dryRun All, which runs every admission step the real creation will (validation,
// so an API server without image volumes drops the field and refuses the volume; ValidatingAdmissionPolicies;
// LimitRanges; ResourceQuotas; Pod Security). A refused delivery gives way to the next (DeliveryImageVolume to
// DeliveryInitContainer, whose init container is sized to the namespace's LimitRanges); when every delivery is
// refused, or a dry run cannot be made, the pod is created without the agent, with a note saying why. It is safe
// for concurrent use.
type Checker struct {
	o   CheckerOptions
	log logrus.FieldLogger

	mu       sync.Mutex
	verdicts map[verdictKey]verdict
	limits   map[string]limitsEntry
	// running are the dry runs under way, by the shape of the pod they
	// create (shapeKey): a creation of the same shape meanwhile waits for
	// that one's verdict rather than making its own (a burst of a
	// Deployment's pods makes one dry run at a time, not one per pod).
	running map[string]*dryRunCall
	// joined counts the creations that took a running dry run's verdict.
	joined int
	// admitted holds, until when, the shapes a dry run admitted: a creation
	// of the same shape within admittedTTL takes that verdict without a
	// dry run of its own.
	admitted map[string]time.Time
}

// admittedTTL is how long a dry run's admission of a pod's shape stands
// for the creations of the same shape: long enough for a rollout's burst to
// need one dry run, short enough that a policy added meanwhile (which would
// refuse the patched pod's creation) is met within seconds.
const admittedTTL = 10 * time.Second

// dryRunCall is a dry run under way; its verdict and why are set before
// done is closed.
type dryRunCall struct {
	done         chan struct{}
	verdict, why string
}

// verdictKey is a delivery in a namespace; delivery "" stands for the dry run itself (it could not be made).
type verdictKey struct {
	namespace string
	delivery  Delivery
}

type verdict struct {
	why   string
	until time.Time
}

type limitsEntry struct {
	ranges []corev1.LimitRange
	until  time.Time
}

// PolicyRules returns the RBAC rules a Checker needs in each namespace whose pods it checks (a Role there, or a
// ClusterRole for all): create on pods, which its dry runs are (RBAC has no verb for a dry run: the same grant
// would let it create pods for real), and list on LimitRanges, to size the init container.
func PolicyRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"limitranges"}, Verbs: []string{"list"}},
	}
}

// NewChecker checks opts and fills in their defaults.
func NewChecker(opts CheckerOptions) (*Checker, error) {
	o := opts
	if o.Client == nil {
		return nil, errors.New("atstart: CheckerOptions need a Client")
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultDryRunTimeout
	}
	if o.TTL <= 0 {
		o.TTL = DefaultVerdictTTL
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxVerdicts
	}
	if o.Logger == nil {
		o.Logger = logrus.StandardLogger()
	}
	if o.now == nil {
		o.now = time.Now
	}
	return &Checker{o: o, log: o.Logger, verdicts: map[verdictKey]verdict{}, limits: map[string]limitsEntry{},
		running: map[string]*dryRunCall{}, admitted: map[string]time.Time{}}, nil
}

// CheckedHandler is Handler with every patch that gives the agent checked by c first (Checker.Deliver).
func CheckedHandler(choose Chooser, c *Checker) func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	return handler(choose, c)
}

// refusal is a delivery the cluster refused, and whether this call learnt it (not from memory).
type refusal struct {
	delivery Delivery
	why      string
	fresh    bool
}

// Deliver returns Mutate's result for pod with the first delivery the cluster admits: in.Delivery, then, after
// DeliveryImageVolume, DeliveryInitContainer. A pod that gets the agent by a later delivery says why in its notes.
// When every delivery is refused, or a dry run cannot be made (the operator may not create pods in the namespace,
// the API server does not answer in time, another webhook does not support dry runs), the result leaves the pod
// without the agent and notes why: a pod is never given a patch that was not admitted. An error is Mutate's (an
// unusable Input).
func (c *Checker) Deliver(ctx context.Context, pod *corev1.Pod, in Input) (Result, error) {
	first := in.Delivery
	if first == "" {
		first = DeliveryImageVolume
	}
	order := []Delivery{first}
	if first == DeliveryImageVolume {
		order = append(order, DeliveryInitContainer)
	}
	log := c.log.WithFields(logrus.Fields{"namespace": pod.Namespace, "pod": podName(pod), "exporter": in.Exporter})
	if why, ok := c.remembered(verdictKey{pod.Namespace, ""}); ok {
		return c.withoutAgent(pod, in, fmt.Sprintf("not injected at start: the operator could not check that the cluster admits the pod with the agent (%s)", why))
	}
	var refused []refusal
	for _, d := range order {
		if why, ok := c.remembered(verdictKey{pod.Namespace, d}); ok {
			refused = append(refused, refusal{d, why, false})
			continue
		}
		try := in
		try.Delivery = d
		try.Notes = slices.Clone(in.Notes)
		for _, r := range refused {
			try.Notes = append(try.Notes, fmt.Sprintf("delivery %s refused by the cluster (%s); the agent is delivered by %s", r.delivery, r.why, d))
		}
		if d == DeliveryInitContainer && try.InitResources == nil {
			res, note := c.initResources(ctx, pod.Namespace, log)
			try.InitResources = &res
			if note != "" {
				try.Notes = append(try.Notes, note)
			}
		}
		res, err := Mutate(pod, try)
		if err != nil || len(res.Injected) == 0 {
			return res, err // no agent: nothing the cluster could refuse
		}
		switch admitted, why := c.dryRun(ctx, pod, res.Patch); admitted {
		case verdictAdmitted:
			c.remember(pod.Namespace, refused)
			if len(refused) > 0 {
				log.WithFields(logrus.Fields{"delivery": d, "refused": refusedList(refused)}).Info("at-start delivery fell back: the cluster refused the first")
			} else {
				log.WithField("delivery", d).Debug("at-start delivery admitted by a dry run")
			}
			return res, nil
		case verdictRefused:
			log.WithFields(logrus.Fields{"delivery": d, "refusal": why}).Info("at-start delivery refused by the cluster's dry run")
			refused = append(refused, refusal{d, why, true})
		default:
			log.WithField("delivery", d).Warnf("at-start dry run could not be made: %s; the pod is created without the agent", why)
			if admitted == verdictUnavailable {
				// A lasting cause (no grant, no dry run possible) is remembered; a
				// dry run that timed out or failed on the way says nothing of the
				// next pod, which is tried again.
				c.rememberFor(verdictKey{pod.Namespace, ""}, why, unavailableTTL)
			}
			return c.withoutAgent(pod, in, fmt.Sprintf("not injected at start: the operator could not check that the cluster admits the pod with the agent (%s)", why))
		}
	}
	if slices.ContainsFunc(refused, func(r refusal) bool { return r.fresh }) {
		// Remembered for the namespace only when the pod without the agent is admitted: a pod refused for its
		// own sake (its quota, its own spec) says nothing of the deliveries.
		switch v, why := c.dryRun(ctx, pod, nil); v {
		case verdictAdmitted:
			c.remember(pod.Namespace, refused)
		case verdictRefused:
			log.WithField("refusal", why).Info("the cluster refuses the pod without the agent too; its refusals of the deliveries are not remembered")
		default:
			log.Warnf("at-start dry run of the pod without the agent could not be made: %s", why)
		}
	}
	log.WithField("refused", refusedList(refused)).Warn("every at-start delivery refused by the cluster; the pod is created without the agent")
	return c.withoutAgent(pod, in, "not injected at start: the cluster refuses the pod with the agent: "+refusedList(refused))
}

func refusedList(rs []refusal) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%s: %s", r.delivery, r.why))
	}
	return strings.Join(parts, "; ")
}

// withoutAgent leaves pod as it is but for its notes: in.Notes and why.
func (c *Checker) withoutAgent(pod *corev1.Pod, in Input, why string) (Result, error) {
	notes := append(slices.Clone(in.Notes), why)
	return Result{Patch: NotesPatch(pod, notes), Notes: notes}, nil
}

// podName is the pod's name, or its generateName and a "*" before the API server names it.
func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Name
	}
	return pod.GenerateName + "*"
}

// The verdicts of a dry run.
const (
	verdictAdmitted    = "admitted"
	verdictRefused     = "refused"
	verdictUnavailable = "unavailable"
	// verdictTransient: the dry run failed on the way (a timeout, a connection); not remembered.
	verdictTransient = "transient"
)

// maxRefusalLen bounds a refusal's message in notes and memory.
const maxRefusalLen = 300

// dryRun creates pod, patched, with dryRun All and says whether the cluster admits it, and why not. Without a
// patch it is the pod as submitted, marked with AnnotationProbe.
func (c *Checker) dryRun(ctx context.Context, pod *corev1.Pod, patch []Op) (string, string) {
	p, err := patched(pod, patch)
	if err != nil {
		return verdictUnavailable, err.Error()
	}
	if patch == nil {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[AnnotationProbe] = "true"
	}
	timeout := c.o.Timeout
	if dl, ok := ctx.Deadline(); ok {
		// Room to answer once the dry run is over.
		timeout = min(timeout, time.Until(dl)-200*time.Millisecond)
	}
	if timeout < 100*time.Millisecond {
		return verdictTransient, "no time left before the webhook's timeout"
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	key, shared := shapeKey(p)
	if shared {
		c.mu.Lock()
		if until, ok := c.admitted[key]; ok {
			if c.o.now().Before(until) {
				c.mu.Unlock()
				return verdictAdmitted, ""
			}
			delete(c.admitted, key)
		}
		if call, ok := c.running[key]; ok {
			// A pod of the same shape is being dry-run: its verdict is this
			// one's. The lock is not held while waiting.
			c.joined++
			c.mu.Unlock()
			select {
			case <-call.done:
				return call.verdict, call.why
			case <-dctx.Done():
				return verdictTransient, "dry run failed: no verdict on a pod of the same shape before the webhook's timeout"
			}
		}
		call := &dryRunCall{done: make(chan struct{})}
		if len(c.running) < c.o.MaxEntries {
			c.running[key] = call
		} else {
			shared = false
		}
		c.mu.Unlock()
		if shared {
			defer func() {
				c.mu.Lock()
				delete(c.running, key)
				if call.verdict == verdictAdmitted {
					now := c.o.now()
					if len(c.admitted) >= c.o.MaxEntries {
						evict(c.admitted, now, func(until time.Time) time.Time { return until })
					}
					c.admitted[key] = now.Add(admittedTTL)
				}
				c.mu.Unlock()
				close(call.done)
			}()
			_, err = c.o.Client.CoreV1().Pods(pod.Namespace).Create(dctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: fieldManager})
			call.verdict, call.why = classify(err)
			return call.verdict, call.why
		}
	}
	_, err = c.o.Client.CoreV1().Pods(pod.Namespace).Create(dctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: fieldManager})
	return classify(err)
}

// shapeKey identifies what the admission steps of a pod's creation read of
// it: its namespace, labels, annotations, owners and spec, but not its name
// (a Deployment's pods differ only by theirs). Two creations of one shape
// under way at once get one dry run. shared is false when the pod cannot be
// encoded (then it is dry-run alone).
func shapeKey(p *corev1.Pod) (key string, shared bool) {
	shape := struct {
		Namespace       string                  `json:"namespace"`
		GenerateName    string                  `json:"generateName"`
		Labels          map[string]string       `json:"labels"`
		Annotations     map[string]string       `json:"annotations"`
		OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
		Spec            corev1.PodSpec          `json:"spec"`
	}{p.Namespace, p.GenerateName, p.Labels, p.Annotations, p.OwnerReferences, p.Spec}
	raw, err := json.Marshal(shape)
	if err != nil {
		return "", false
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:]), true
}

// classify turns a dry run's error into its verdict and a short reason.
func classify(err error) (string, string) {
	if err == nil || apierrors.IsAlreadyExists(err) {
		// A name taken is found after admission: the patched pod was admitted (and its real creation fails on
		// the name whatever the patch).
		return verdictAdmitted, ""
	}
	msg := err.Error()
	if len(msg) > maxRefusalLen {
		msg = strings.ToValidUTF8(msg[:maxRefusalLen-3], "") + "..."
	}
	switch {
	case apierrors.IsForbidden(err) && strings.Contains(msg, "cannot create resource"):
		// RBAC's denial of the dry run itself, not an admission step's refusal of the pod.
		return verdictUnavailable, "dry run forbidden (the operator needs create on pods in the namespace): " + msg
	case strings.Contains(msg, "does not support dry run"):
		return verdictUnavailable, "dry run not possible: " + msg
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsRequestEntityTooLargeError(err):
		return verdictRefused, msg
	}
	return verdictTransient, "dry run failed: " + msg
}

// patched returns a copy of pod with patch applied, ready to be created: without what the API server sets, and
// without blockOwnerDeletion, which OwnerReferencesPermissionEnforcement would check against the operator (not
// the pod's creator).
func patched(pod *corev1.Pod, patch []Op) (*corev1.Pod, error) {
	doc, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	if len(patch) > 0 {
		raw, err := json.Marshal(patch)
		if err != nil {
			return nil, err
		}
		p, err := jsonpatch.DecodePatch(raw)
		if err != nil {
			return nil, fmt.Errorf("the patch: %w", err)
		}
		if doc, err = p.Apply(doc); err != nil {
			return nil, fmt.Errorf("the patch does not apply: %w", err)
		}
	}
	var out corev1.Pod
	if err := json.Unmarshal(doc, &out); err != nil {
		return nil, err
	}
	out.ResourceVersion, out.UID, out.ManagedFields = "", "", nil
	for i := range out.OwnerReferences {
		out.OwnerReferences[i].BlockOwnerDeletion = nil
	}
	return &out, nil
}

// remembered returns a live verdict.
func (c *Checker) remembered(k verdictKey) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.verdicts[k]
	if !ok {
		return "", false
	}
	if !c.o.now().Before(v.until) {
		delete(c.verdicts, k)
		return "", false
	}
	return v.why, true
}

// remember keeps the fresh refusals of namespace for TTL.
func (c *Checker) remember(namespace string, rs []refusal) {
	for _, r := range rs {
		if r.fresh {
			c.rememberFor(verdictKey{namespace, r.delivery}, r.why, c.o.TTL)
		}
	}
}

func (c *Checker) rememberFor(k verdictKey, why string, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.o.now()
	if _, ok := c.verdicts[k]; !ok && len(c.verdicts) >= c.o.MaxEntries {
		evict(c.verdicts, now, func(v verdict) time.Time { return v.until })
	}
	c.verdicts[k] = verdict{why: why, until: now.Add(ttl)}
}

// evict makes room in m: every expired entry goes, or else the one nearest its end.
func evict[K comparable, V any](m map[K]V, now time.Time, until func(V) time.Time) {
	var first K
	var firstUntil time.Time
	n := 0
	for k, v := range m {
		u := until(v)
		if !now.Before(u) {
			delete(m, k)
			continue
		}
		if n == 0 || u.Before(firstUntil) {
			first, firstUntil = k, u
		}
		n++
	}
	if n == len(m) && n > 0 {
		delete(m, first)
	}
}

// initResources are the init container's requests and limits fitted to the namespace's LimitRanges, and a note
// when they differ from the defaults or cannot fit. LimitRanges that cannot be read leave the defaults (the dry
// run then says whether they fit).
func (c *Checker) initResources(ctx context.Context, namespace string, log logrus.FieldLogger) (corev1.ResourceRequirements, string) {
	ranges, err := c.limitRanges(ctx, namespace)
	if err != nil {
		log.Warnf("at-start: cannot read the namespace's LimitRanges (%v); the init container keeps its default resources", err)
		return DefaultInitResources(), ""
	}
	res, err := FitLimitRanges(DefaultInitResources(), ranges)
	if err != nil {
		return DefaultInitResources(), "the init container's resources cannot fit the namespace's LimitRanges: " + err.Error()
	}
	return res, ""
}

// limitRanges lists the namespace's LimitRanges, remembered for TTL.
func (c *Checker) limitRanges(ctx context.Context, namespace string) ([]corev1.LimitRange, error) {
	now := c.o.now()
	c.mu.Lock()
	e, ok := c.limits[namespace]
	c.mu.Unlock()
	if ok && now.Before(e.until) {
		return e.ranges, nil
	}
	lctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	list, err := c.o.Client.CoreV1().LimitRanges(namespace).List(lctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.limits[namespace]; !ok && len(c.limits) >= c.o.MaxEntries {
		evict(c.limits, now, func(e limitsEntry) time.Time { return e.until })
	}
	c.limits[namespace] = limitsEntry{ranges: list.Items, until: now.Add(c.o.TTL)}
	return list.Items, nil
}
