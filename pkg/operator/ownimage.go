package operator

import (
	"context"
	"fmt"
	"path"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// operatorCommand is the operator's binary in its image; OwnImage finds the
// operator's container in its pod by it.
const operatorCommand = "prometheus-jmx-exporter-operator"

// OwnImage returns the image of the operator's own container in its pod
// namespace/name (the downward API's POD_NAMESPACE and POD_NAME): the
// container whose command runs operatorCommand, else the one named
// "operator", else the pod's only container. The operator's image is the
// agent image, so whatever renamed it (a kustomize images: rewrite, a Helm
// image.repository, a mirror) renames the agent image too.
//
// It needs get on pods in the operator's namespace (the -home Role has it).
// Errors the API server may answer differently a moment later are retried
// for up to a minute; a denial or a missing pod is returned at once.
func OwnImage(ctx context.Context, client kubernetes.Interface, namespace, name string) (string, error) {
	var pod *corev1.Pod
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			pod = p
			return true, nil
		case apierrors.IsForbidden(err), apierrors.IsNotFound(err), apierrors.IsUnauthorized(err):
			return false, err
		default:
			last = err
			return false, nil
		}
	})
	if err != nil {
		if last != nil && wait.Interrupted(err) {
			err = fmt.Errorf("%v (last error: %w)", err, last)
		}
		return "", fmt.Errorf("read own pod %s/%s: %w", namespace, name, err)
	}
	c, err := operatorContainer(pod)
	if err != nil {
		return "", fmt.Errorf("own pod %s/%s: %w", namespace, name, err)
	}
	if c.Image == "" {
		return "", fmt.Errorf("own pod %s/%s: container %s has no image", namespace, name, c.Name)
	}
	return c.Image, nil
}

// operatorContainer picks the operator's container of its pod.
func operatorContainer(pod *corev1.Pod) (*corev1.Container, error) {
	cs := pod.Spec.Containers
	for i := range cs {
		if len(cs[i].Command) > 0 && path.Base(cs[i].Command[0]) == operatorCommand {
			return &cs[i], nil
		}
	}
	for i := range cs {
		if cs[i].Name == "operator" {
			return &cs[i], nil
		}
	}
	if len(cs) == 1 {
		return &cs[0], nil
	}
	return nil, fmt.Errorf("none of its %d containers runs %s or is named operator", len(cs), operatorCommand)
}
