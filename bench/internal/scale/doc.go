// Package scale is the operator's scale benchmark (issue 28): the real
// prometheus-jmx-exporter-operator binary, run as a process with a
// kubeconfig, against the real kube-apiserver and etcd of pkg/testenv, with
// no node. The benchmark creates the pods as objects and plays their
// kubelet: it reports their containers running through the status
// subresource, answers every ephemeral container the operator adds with a
// terminated status whose termination message is what jmx-attach writes
// (jvm.FormatTerminationLog, the function jmx-attach's --termination-log
// uses), and, in a steady-state phase, restarts containers at a steady rate
// (a new container ID, restartCount+1).
//
// Two shapes: one exporter selecting every pod (ShapeOne), and one exporter
// per PodsPerExporter pods (ShapeMany). The figures (Result) come from the
// operator's own /metrics (handlerkit_client_requests_total, by verb and
// resource), from /proc/<pid> of its process (CPU seconds, VmHWM), from the
// API server (the exporters' JSON size) and from the pod records the
// operator writes (jmx.handlerkit.dev/agents), which the simulated kubelet
// watches.
package scale
