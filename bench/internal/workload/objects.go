package workload

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
)

// ConfigMapName is the ConfigMap every exporter names in spec.config: the
// "other object" the realistic handler reads.
const ConfigMapName = "bench-config"

// ConfigMapKey is the key the exporters' config lives under.
const ConfigMapKey = "config.yaml"

// ExporterName is the name of the i-th benchmark exporter.
func ExporterName(i int) string { return fmt.Sprintf("pje-%05d", i) }

// PodName is the name of the i-th benchmark Pod.
func PodName(i int) string { return fmt.Sprintf("pod-%05d", i) }

// Exporter returns the i-th benchmark exporter in namespace ns, shaped like
// a user's: labels, an annotation, a selector and a config reference.
func Exporter(ns string, i int) *jmxv1alpha1.PrometheusJmxExporter {
	app := fmt.Sprintf("app-%03d", i%100)
	return &jmxv1alpha1.PrometheusJmxExporter{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   ns,
			Name:        ExporterName(i),
			Labels:      map[string]string{"app.kubernetes.io/name": app, "team": "payments"},
			Annotations: map[string]string{"handlerkit.dev/owner": "benchmark"},
		},
		Spec: jmxv1alpha1.PrometheusJmxExporterSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": app}},
			Config:   &jmxv1alpha1.ExporterConfig{ConfigMapName: ConfigMapName, ConfigMapKey: ConfigMapKey},
		},
	}
}

// ConfigMap returns the ConfigMap the exporters in ns read.
func ConfigMap(ns string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ConfigMapName},
		Data:       map[string]string{ConfigMapKey: "lowercaseOutputName: true\nrules:\n- pattern: \".*\"\n"},
	}
}

// Pod returns the i-th benchmark Pod in ns, shaped like a Deployment's
// replica: an owner reference, labels, one container with ports, env,
// resources, probes and the projected ServiceAccount token volume that
// admission would add.
func Pod(ns string, i int) *corev1.Pod {
	app := fmt.Sprintf("app-%03d", i%100)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns,
			Name:      PodName(i),
			Labels:    map[string]string{"app.kubernetes.io/name": app, "pod-template-hash": "7d9c8b6f5"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-7d9c8b6f5",
				UID: "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: "default",
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.example.com/payments/" + app + ":v1.42.0",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "jmx", ContainerPort: 9404}},
				Env: []corev1.EnvVar{
					{Name: "JAVA_TOOL_OPTIONS", Value: "-XX:MaxRAMPercentage=75"},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
				LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/live", Port: intstr.FromString("http")}}},
				VolumeMounts:   []corev1.VolumeMount{{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				},
			}}}},
		},
	}
}

// RunningStatus is the status a kubelet would report for pod: Running and
// Ready, with one container status.
func RunningStatus(pod *corev1.Pod, i int) corev1.PodStatus {
	now := metav1.Now()
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now}
	}
	return corev1.PodStatus{
		Phase:      corev1.PodRunning,
		Conditions: []corev1.PodCondition{cond(corev1.PodInitialized), cond(corev1.PodReady), cond(corev1.ContainersReady), cond(corev1.PodScheduled)},
		HostIP:     "10.0.0.1",
		PodIP:      fmt.Sprintf("10.88.%d.%d", i/250, i%250+2),
		StartTime:  &now,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", Ready: true, Started: ptr.To(true),
			Image: pod.Spec.Containers[0].Image, ImageID: "registry.example.com/payments@sha256:4f5a1c0e9d8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f",
			ContainerID: fmt.Sprintf("containerd://%064d", i),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	}
}
