package v1alpha1

// Condition types of MemcachedStatus.Conditions.
const (
	// ConditionAvailable is True when every one of spec.size memcached pods
	// is Ready (and, for size 0, when the Deployment has scaled to zero).
	ConditionAvailable = "Available"

	// ConditionProgressing is True while the Deployment is still moving
	// towards spec.size ready pods, and False once it has got there.
	ConditionProgressing = "Progressing"
)

// Condition reasons, CamelCase as metav1.Condition requires.
const (
	// ReasonAllNodesReady (Available=True, Progressing=False): the
	// Deployment has spec.size ready pods and no others.
	ReasonAllNodesReady = "AllNodesReady"

	// ReasonScaling (Available=False, Progressing=True): the number of
	// pods, or of ready pods, differs from spec.size.
	ReasonScaling = "Scaling"
)
