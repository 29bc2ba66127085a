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
