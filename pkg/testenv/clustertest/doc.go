// Package clustertest holds the end-to-end tests of testenv's cluster mode:
// real pods on a real kubelet, containerd and runc, with images built by
// package images. It has no API; all of it is in its tests, which share one
// cluster-mode environment (see TestMain).
package clustertest
