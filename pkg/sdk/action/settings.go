package action

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Settings is what a list of Options asks of a write. Implementations of
// Interface other than Writer, such as pkg/sdk/sdktest's, read the Options
// they are given through SettingsOf.
type Settings struct {
	// FieldManager names the writer; empty lets the implementation choose.
	FieldManager string
	// DryRun asks for the reply without persisting anything.
	DryRun bool
	// Force makes server-side apply take conflicting fields.
	Force bool
	// PropagationPolicy, GracePeriodSeconds and Preconditions tune Delete;
	// nil when not given.
	PropagationPolicy  *metav1.DeletionPropagation
	GracePeriodSeconds *int64
	Preconditions      *metav1.Preconditions
	// Subresource is the subresource Patch writes ("status"); empty for
	// the object itself.
	Subresource string
}

// SettingsOf applies opts in order and returns the result. The pointers
// are the caller's own copies.
func SettingsOf(opts ...Option) Settings {
	o := collect(opts)
	s := Settings{FieldManager: o.fieldManager, DryRun: o.dryRun, Force: o.force, Subresource: o.subresource}
	if o.propagation != nil {
		p := *o.propagation
		s.PropagationPolicy = &p
	}
	if o.gracePeriod != nil {
		g := *o.gracePeriod
		s.GracePeriodSeconds = &g
	}
	if o.preconditions != nil {
		s.Preconditions = o.preconditions.DeepCopy()
	}
	return s
}
