package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// A cluster-mode environment runs real pods from locally built images; a
// package's tests share one, started in TestMain.
func ExampleWithNode() {
	ctx := context.Background()
	env, err := testenv.Start(ctx, testenv.WithNode(), testenv.WithImageArchives("/path/to/echo.tar"))
	if errors.Is(err, testenv.ErrNodeUnsupported) && os.Getenv("CI") == "" {
		fmt.Println("skipping:", err) // not root, no overlayfs, no runc, ...
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer env.Stop()

	ns, err := env.CreateNamespace(ctx, "example") // waits for its default ServiceAccount
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = env.Clientset().CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "echo", Image: "localhost/handlerkit/echo:v1", ImagePullPolicy: corev1.PullNever,
		}}},
	}, metav1.CreateOptions{})
	fmt.Println(err)
}
