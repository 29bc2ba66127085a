package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Memcached asks the operator for a Deployment of spec.size memcached
// servers, owned by the Memcached so that deleting it deletes them.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,categories=handlerkit
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.spec.size`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.readyNodes`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Memcached struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state: how many memcached servers to run.
	// +required
	Spec MemcachedSpec `json:"spec"`

	// Status is written by the operator only, through the status subresource.
	// +optional
	Status MemcachedStatus `json:"status,omitempty"`
}

// MemcachedSpec is the desired state of a Memcached.
type MemcachedSpec struct {
	// Size is the number of memcached servers (Deployment replicas). 0 keeps
	// the Deployment with no pods; more than 100 is refused by the API server.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Size int32 `json:"size"`
}

// MemcachedStatus is the observed state of a Memcached.
type MemcachedStatus struct {
	// ObservedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Nodes are the names of the memcached pods, sorted: every pod of the
	// Deployment that is not terminating, ready or not.
	// +optional
	// +listType=set
	Nodes []string `json:"nodes,omitempty"`

	// ReadyNodes is how many of Nodes are Ready, that is serving.
	// +optional
	ReadyNodes int32 `json:"readyNodes,omitempty"`

	// Conditions are Available and Progressing (see conditions.go).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// MemcachedList is a list of Memcached.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type MemcachedList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the Memcached objects.
	Items []Memcached `json:"items"`
}
