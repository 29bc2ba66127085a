package testenv

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// startExisting uses the cluster a kubeconfig points at. Nothing is started
// and Stop leaves the cluster alone.
func startExisting(path string) (*Environment, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("testenv: loading %s=%s: %w", EnvKubeconfig, path, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("testenv: client for %s: %w", path, err)
	}
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		return nil, fmt.Errorf("testenv: the cluster in %s=%s does not answer: %w", EnvKubeconfig, path, err)
	}
	return &Environment{config: cfg, clientset: cs, existing: true, kubeconfigPath: path}, nil
}
