// Command inclusterprobe runs in a pod in testenv's service-proxy tests. It
// connects to the apiserver exactly as an operator Deployment does, with
// rest.InClusterConfig ($KUBERNETES_SERVICE_HOST and _PORT, the projected
// ServiceAccount token and CA), asks who it is with a SelfSubjectReview, and
// prints the answer; with -get it also fetches a URL (a ClusterIP Service)
// and prints the body. Any failure exits non-zero, with the error printed.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func main() {
	api := flag.Bool("api", true, "ask the apiserver who this pod is, through rest.InClusterConfig")
	get := flag.String("get", "", "a URL to fetch, for example a ClusterIP Service")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if *api {
		if err := whoAmI(ctx); err != nil {
			fail(err)
		}
	}
	if *get != "" {
		if err := fetch(ctx, *get); err != nil {
			fail(err)
		}
	}
}

func whoAmI(ctx context.Context) error {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	fmt.Printf("host %s\n", cfg.Host)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{},
		metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("SelfSubjectReview: %w", err)
	}
	fmt.Printf("user %s\n", review.Status.UserInfo.Username)
	return nil
}

func fetch(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Printf("status %d\nbody %s", resp.StatusCode, body)
	return nil
}

func fail(err error) {
	fmt.Printf("error %v\n", err)
	os.Exit(1)
}
