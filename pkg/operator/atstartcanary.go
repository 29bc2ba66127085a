package operator

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// atStartClaimSlack is how much longer than the breaker window a canary
// claim at start holds: the time for the canary pod to be scheduled, pull
// its images and start its JVM.
const atStartClaimSlack = 2 * time.Minute

// atStartClaimFor is how long a canary claim at start holds other pods back.
func (r *Reconciler) atStartClaimFor() time.Duration {
	return r.opts.BreakerWindow + atStartClaimSlack
}

// atStartHeld is the start-time half of the canary (gate is the attach
// half): an error that says why the pod being created is not given the
// agent while another pod tries the exporter's unproven change at start
// (a live status.atStartCanary), nil otherwise.
func (r *Reconciler) atStartHeld(ex *jmxv1alpha1.PrometheusJmxExporter, v *verdict) error {
	if c := ex.Status.AtStartCanary; !v.proven && claimHolds(c, v, r.atStartClaimFor(), time.Now()) {
		if c.AttachedPod != "" {
			return fmt.Errorf("%s: the exporter's change (generation %d, config %s) is being tried on one running pod first (%s, by live attach since %s): "+
				"no other pod gets the agent until that pod's JVM has run it for %s",
				jmxv1alpha1.ReasonChangeBeingTried, v.generation, v.configHash, c.AttachedPod, c.ClaimedAt.UTC().Format(time.RFC3339), r.opts.BreakerWindow)
		}
		return fmt.Errorf("%s: the exporter's change (generation %d, config %s) is being tried on one pod first (given the agent at %s): "+
			"no other pod gets the agent until that pod's JVM has run it for %s",
			jmxv1alpha1.ReasonChangeBeingTried, v.generation, v.configHash, c.ClaimedAt.UTC().Format(time.RFC3339), r.opts.BreakerWindow)
	}
	return nil
}

// claimAtStart claims, for the pod being created, the try of the
// exporter's unproven change at start, in the exporter's status, with an
// update that the API server orders: of the webhook's replicas and of
// concurrent admissions exactly one wins, and the others get an error that
// says why their pod is created without the agent. The webhook calls it
// (atstart.Input.Claim) once Mutate has chosen containers to inject, so that
// a pod left alone claims nothing. On a conflict the exporter is read again
// from the API server and judged anew; a change proven meanwhile needs no
// claim.
func (r *Reconciler) claimAtStart(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, v verdict) error {
	for attempt := 0; ; attempt++ {
		if v.proven {
			return nil
		}
		if err := r.atStartHeld(ex, &v); err != nil {
			return err
		}
		claimed := ex.DeepCopy()
		claimed.Status.AtStartCanary = &jmxv1alpha1.AtStartCanary{Generation: v.generation, ConfigSHA256: v.configSHA, ClaimedAt: metav1.Now()}
		err := action.For(r.op).UpdateStatus(ctx, claimed)
		if err == nil && claimed.Status.AtStartCanary == nil {
			// A CRD older than this operator prunes the field: no other
			// replica or admission would see the claim, so none is made.
			return fmt.Errorf("%s: the API server dropped status.atStartCanary: the PrometheusJmxExporter CRD is older than this operator; apply this release's CRD",
				jmxv1alpha1.ReasonChangeBeingTried)
		}
		if err == nil {
			r.op.Logger().Infof("operator: %s/%s: a pod being created tries the exporter's change (generation %d, config %s) at start, alone",
				ex.Namespace, ex.Name, v.generation, v.configHash)
			return nil
		}
		if !apierrors.IsConflict(err) || attempt >= 3 {
			return fmt.Errorf("%s: cannot claim the try of the change at start in the exporter's status: %v", jmxv1alpha1.ReasonChangeBeingTried, err)
		}
		fresh := &jmxv1alpha1.PrometheusJmxExporter{}
		fresh.Namespace, fresh.Name = ex.Namespace, ex.Name
		if err := r.read.Get(ctx, fresh, query.Live()); err != nil {
			return fmt.Errorf("cannot read exporter %s/%s again: %w", ex.Namespace, ex.Name, err)
		}
		if fresh.Generation != ex.Generation {
			return fmt.Errorf("%s: the exporter's spec changed meanwhile", jmxv1alpha1.ReasonChangeBeingTried)
		}
		ex = fresh
		v = r.verdictOf(ctx, ex, r.defaulted(ex.Spec))
		if reason, msg := v.why(); reason != "" {
			return fmt.Errorf("%s: %s", reason, msg)
		}
	}
}

// claimHolds says whether claim c holds other pods back from the change v
// judges at now: it names v's generation and config and is younger than
// holdFor.
func claimHolds(c *jmxv1alpha1.AtStartCanary, v *verdict, holdFor time.Duration, now time.Time) bool {
	return c != nil && c.Generation == v.generation && c.ConfigSHA256 == v.configSHA && now.Sub(c.ClaimedAt.Time) < holdFor
}

// attachClaimRenew is the age at which the leader renews its attach claim
// while the try lasts, so that the claim outlives the try: a try that
// landed holds for the breaker window after its load, and a renewed claim
// for the window plus atStartClaimSlack after its renewal.
const attachClaimRenew = time.Minute

// claimForAttach makes the attach canary visible to the webhook (mode
// Both): before the leader attaches an unproven change to one running JVM
// first, it claims status.atStartCanary for that pod (attachedPod), with an
// update the API server orders against the webhook's claims, so that a
// change is never tried on an attached JVM and on a pod at its start at
// once. It renews the claim while the try lasts (plan.attachTrying) and
// drops it, before anything else of the look acts (restartOnRefusal evicts
// only once no claim holds), when the try ended (status drops it too, should
// that write fail). When the claim cannot be written (a pod
// being created claimed the try first: a conflict), the canary's job does
// not run and the exporter is looked at again in a second.
func (r *Reconciler) claimForAttach(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, p *plan) {
	if p.spec.Injection.Mode != jmxv1alpha1.InjectionModeBoth || p.proven {
		if c := ex.Status.AtStartCanary; c != nil && c.AttachedPod != "" {
			r.releaseAttachClaim(ctx, ex, p)
		}
		return
	}
	canary := -1
	for i, j := range p.jobs {
		if j.canary {
			canary = i
			break
		}
	}
	// The leader's own claim, even one that no longer holds: a try that
	// lasts renews it.
	var held *jmxv1alpha1.AtStartCanary
	if c := ex.Status.AtStartCanary; c != nil && c.AttachedPod != "" && c.Generation == p.generation && c.ConfigSHA256 == p.configSHA {
		held = c
	}
	if canary < 0 && !p.attachTrying {
		if c := ex.Status.AtStartCanary; c != nil && c.AttachedPod != "" {
			r.releaseAttachClaim(ctx, ex, p)
		}
		return
	}
	var pod string
	switch {
	case canary >= 0:
		pod = p.jobs[canary].pod.Name
		if held != nil && held.AttachedPod == pod && time.Since(held.ClaimedAt.Time) < attachClaimRenew {
			return
		}
	case p.attachTrying && held != nil:
		if time.Since(held.ClaimedAt.Time) < attachClaimRenew {
			return
		}
		pod = held.AttachedPod
	default:
		return
	}
	claimed := ex.DeepCopy()
	claimed.Status.AtStartCanary = &jmxv1alpha1.AtStartCanary{Generation: p.generation, ConfigSHA256: p.configSHA,
		ClaimedAt: metav1.Now(), AttachedPod: pod}
	if err := action.For(r.op).UpdateStatus(ctx, claimed); err != nil {
		if canary >= 0 {
			p.jobs = append(p.jobs[:canary], p.jobs[canary+1:]...)
		}
		p.retryIn = minPositive(p.retryIn, time.Second)
		r.op.Logger().Infof("operator: %s/%s: the try of the change on pod %s by live attach waits: cannot claim it in the exporter's status (a pod being created may have claimed it at start): %v",
			ex.Namespace, ex.Name, pod, err)
		return
	}
	ex.ResourceVersion = claimed.ResourceVersion
	ex.Status.AtStartCanary = claimed.Status.AtStartCanary
	p.attachClaim = claimed.Status.AtStartCanary
}

// releaseAttachClaim drops the leader's attach claim from the exporter's
// status: its try ended (proven, refused, its pod gone, the exporter may not
// act, or its mode changed). A failed write is left to the status write of
// the same look, which drops it too.
func (r *Reconciler) releaseAttachClaim(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, p *plan) {
	released := ex.DeepCopy()
	released.Status.AtStartCanary = nil
	err := action.For(r.op).UpdateStatus(ctx, released)
	if err == nil {
		ex.ResourceVersion = released.ResourceVersion
		ex.Status.AtStartCanary = nil
		p.attachClaim = nil
		return
	}
	if apierrors.IsConflict(err) {
		// The cache has not caught up with a write of the leader's own:
		// drop the claim from the exporter as stored, and leave ex stale,
		// so that this look's other writes (an eviction's state, the
		// status) meet a conflict and the next look, on the stored
		// exporter, does them.
		fresh := &jmxv1alpha1.PrometheusJmxExporter{}
		fresh.Namespace, fresh.Name = ex.Namespace, ex.Name
		if err = r.read.Get(ctx, fresh, query.Live()); err == nil {
			if c := fresh.Status.AtStartCanary; c == nil || c.AttachedPod == "" {
				p.attachClaim = nil // dropped already, or a pod at start claimed it
				return
			}
			fresh.Status.AtStartCanary = nil
			if err = action.For(r.op).UpdateStatus(ctx, fresh); err == nil {
				p.attachClaim = nil
				return
			}
		}
	}
	r.op.Logger().Infof("operator: %s/%s: cannot drop the claim of the ended try by live attach yet: %v", ex.Namespace, ex.Name, err)
}
