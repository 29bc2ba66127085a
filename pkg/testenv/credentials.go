package testenv

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// ConfigForUser returns a rest.Config that authenticates as user in groups,
// with a client certificate signed by the Environment's CA, so requests are
// authorized by RBAC exactly as for a real user. On an existing cluster the
// admin identity impersonates the user instead.
func (e *Environment) ConfigForUser(user string, groups ...string) (*rest.Config, error) {
	if user == "" {
		return nil, fmt.Errorf("testenv: ConfigForUser needs a user name")
	}
	cfg := e.Config()
	if e.existing {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
		return cfg, nil
	}
	pair, err := e.ca.client(user, groups)
	if err != nil {
		return nil, err
	}
	cfg.TLSClientConfig.CertData = pair.certPEM
	cfg.TLSClientConfig.KeyData = pair.keyPEM
	return cfg, nil
}

// ConfigForServiceAccount returns a rest.Config that authenticates with a
// real token of the ServiceAccount namespace/name, issued through the
// TokenRequest API and valid for an hour. The ServiceAccount is created when
// it does not exist; the namespace must exist.
func (e *Environment) ConfigForServiceAccount(ctx context.Context, namespace, name string) (*rest.Config, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	_, err := e.clientset.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("testenv: creating ServiceAccount %s/%s: %w", namespace, name, err)
	}
	expiry := int64(3600)
	tr, err := e.clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("testenv: requesting a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	cfg := e.Config()
	cfg.TLSClientConfig.CertData = nil
	cfg.TLSClientConfig.KeyData = nil
	cfg.TLSClientConfig.CertFile = ""
	cfg.TLSClientConfig.KeyFile = ""
	cfg.BearerToken = tr.Status.Token
	cfg.BearerTokenFile = ""
	cfg.Username, cfg.Password = "", ""
	cfg.Impersonate = rest.ImpersonationConfig{}
	cfg.ExecProvider, cfg.AuthProvider = nil, nil
	return cfg, nil
}

// CreateNamespace creates a namespace named prefix plus a random suffix and
// returns its name, so that tests sharing an Environment stay apart.
func (e *Environment) CreateNamespace(ctx context.Context, prefix string) (string, error) {
	ns, err := e.clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("testenv: creating namespace %s-*: %w", prefix, err)
	}
	if e.node != nil {
		if err := e.node.waitDefaultServiceAccount(ctx, e.clientset, ns.Name); err != nil {
			return "", err
		}
	}
	return ns.Name, nil
}
