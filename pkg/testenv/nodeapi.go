package testenv

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// authorizationMode is RBAC alone for the control plane, and Node,RBAC in
// cluster mode so the kubelet's node credential is authorised as kubeadm's.
func authorizationMode(o options) string {
	if o.node.enabled {
		return "--authorization-mode=Node,RBAC"
	}
	return "--authorization-mode=RBAC"
}

// disabledAdmission turns the ServiceAccount admission plugin off in
// control-plane mode: without a controller-manager nobody creates the
// default ServiceAccount, and Pods would be refused for lack of it. Cluster
// mode runs one, and keeps the plugin so that pods get their token volume.
func disabledAdmission(o options) string {
	if o.node.enabled {
		return "--disable-admission-plugins="
	}
	return "--disable-admission-plugins=ServiceAccount"
}

// endpointReconciler leaves the kubernetes Service alone when the apiserver
// listens on loopback, which Endpoints may not hold; with the service proxy
// it listens on the node's bridge, and the lease reconciler points the
// Service there.
func endpointReconciler(o options) string {
	if o.node.serviceProxy {
		return "--endpoint-reconciler-type=lease"
	}
	return "--endpoint-reconciler-type=none"
}

// nodeAPIServerArgs are the apiserver flags cluster mode adds.
func nodeAPIServerArgs(o options) []string {
	if !o.node.enabled {
		return nil
	}
	return []string{
		// The node's InternalIP is 127.0.0.1; never try its hostname.
		"--kubelet-preferred-address-types=InternalIP",
		"--enable-admission-plugins=NodeRestriction",
	}
}

// prepareNode checks the machine and builds whatever cluster mode needs
// before the start timeout begins: the first build of the node binaries
// takes minutes.
func prepareNode(ctx context.Context, o options) error {
	if err := preflight(); err != nil {
		return err
	}
	if o.node.serviceProxy {
		if err := proxyPreflight(); err != nil {
			return err
		}
	}
	if err := EnsureBinaries(ctx, nodeBinaries(o)...); err != nil {
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := pauseArchive(bctx); err != nil {
		return err
	}
	return nil
}

// defaultStartTimeout and defaultNodeStartTimeout bound Start without
// WithStartTimeout, for control-plane and cluster mode.
const (
	defaultStartTimeout     = 60 * time.Second
	defaultNodeStartTimeout = 3 * time.Minute
)

// PodCIDR is the IPv4 range pods of a cluster-mode environment get their
// addresses from, on a bridge of their own; "" without WithNode.
func (e *Environment) PodCIDR() string {
	if e.node == nil {
		return ""
	}
	return e.node.podCIDR
}

// LoadImageArchive imports a docker-archive or OCI tarball (for example one
// written by package images) into the node's containerd, so that pods can
// run it with imagePullPolicy: Never. It needs WithNode.
func (e *Environment) LoadImageArchive(ctx context.Context, file string) error {
	if e.node == nil {
		return fmt.Errorf("testenv: LoadImageArchive needs a cluster-mode environment (WithNode)")
	}
	return e.node.importArchive(ctx, file)
}

// nodeProcesses lists the cluster-mode components, for Processes.
func (e *Environment) nodeProcesses() []*Process {
	if e.node == nil {
		return nil
	}
	var out []*Process
	for _, p := range append(append([]*Process(nil), e.node.controls...), e.node.containerd, e.node.kubelet, e.node.kubeProxy) {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// waitDefaultServiceAccount waits for the controller-manager to create the
// default ServiceAccount of a new namespace: until then the ServiceAccount
// admission plugin refuses its pods.
func (n *node) waitDefaultServiceAccount(ctx context.Context, client kubernetes.Interface, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: default ServiceAccount of namespace %s not created: %w (last error: %v)", ns, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
