package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeconfigName names the context, cluster and user of a kubeconfig that
// WriteKubeconfig writes, and the file KubeconfigFile writes.
const kubeconfigName = "testenv"

// WriteKubeconfig writes a kubeconfig file for the admin identity that
// Config returns to path, with mode 0600: the server URL, the Environment's
// CA, the credentials and a current context, so that tools such as kubectl
// and code that reads $KUBECONFIG reach the Environment. The file is
// replaced atomically when it exists.
func (e *Environment) WriteKubeconfig(path string) error {
	data, err := clientcmd.Write(kubeconfigFor(e.config))
	if err != nil {
		return fmt.Errorf("testenv: encoding the kubeconfig: %w", err)
	}
	if err := writePrivateFile(path, data); err != nil {
		return fmt.Errorf("testenv: writing the kubeconfig: %w", err)
	}
	return nil
}

// KubeconfigFile returns the path of a kubeconfig for the admin identity,
// written into the Environment's directory on first use (see
// WriteKubeconfig) and removed by Stop. For an existing cluster it is the
// file HANDLERKIT_TEST_KUBECONFIG names.
func (e *Environment) KubeconfigFile() (string, error) {
	if e.existing {
		return e.kubeconfigPath, nil
	}
	e.kubeconfigMu.Lock()
	defer e.kubeconfigMu.Unlock()
	if e.kubeconfigPath != "" {
		return e.kubeconfigPath, nil
	}
	path := filepath.Join(e.dir, kubeconfigName+".kubeconfig")
	if err := e.WriteKubeconfig(path); err != nil {
		return "", err
	}
	e.kubeconfigPath = path
	return path, nil
}

// kubeconfigFor turns a rest.Config into a kubeconfig with one context.
// Files win over inline data where a rest.Config loaded from a kubeconfig
// holds both, so that a rotated token or certificate file keeps working.
func kubeconfigFor(c *rest.Config) clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cluster := &clientcmdapi.Cluster{
		Server:                c.Host,
		InsecureSkipTLSVerify: c.Insecure,
		TLSServerName:         c.ServerName,
	}
	if c.CAFile != "" {
		cluster.CertificateAuthority = c.CAFile
	} else {
		cluster.CertificateAuthorityData = c.CAData
	}
	user := &clientcmdapi.AuthInfo{
		Username:             c.Username,
		Password:             c.Password,
		Impersonate:          c.Impersonate.UserName,
		ImpersonateUID:       c.Impersonate.UID,
		ImpersonateGroups:    c.Impersonate.Groups,
		ImpersonateUserExtra: c.Impersonate.Extra,
		AuthProvider:         c.AuthProvider,
		Exec:                 c.ExecProvider,
	}
	if c.CertFile != "" || c.KeyFile != "" {
		user.ClientCertificate, user.ClientKey = c.CertFile, c.KeyFile
	} else {
		user.ClientCertificateData, user.ClientKeyData = c.CertData, c.KeyData
	}
	if c.BearerTokenFile != "" {
		user.TokenFile = c.BearerTokenFile
	} else {
		user.Token = c.BearerToken
	}
	cfg.Clusters[kubeconfigName] = cluster
	cfg.AuthInfos[kubeconfigName] = user
	cfg.Contexts[kubeconfigName] = &clientcmdapi.Context{Cluster: kubeconfigName, AuthInfo: kubeconfigName}
	cfg.CurrentContext = kubeconfigName
	return *cfg
}

// writePrivateFile writes data to path with mode 0600 through a temporary
// file in the same directory and a rename, so that a reader never sees a
// partial file and an existing file's wider mode is not kept.
func writePrivateFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename there is nothing to remove
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
