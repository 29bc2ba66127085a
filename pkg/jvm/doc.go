// Package jvm finds running HotSpot JVMs through /proc and loads a java agent into them over the HotSpot
// dynamic-attach protocol, in pure Go: no JDK, shell or second JVM is needed in the target's container.
//
// The attach protocol on Linux works like this. The client creates a trigger file, .attach_pid<nspid>, in the
// JVM's working directory or /tmp and sends SIGQUIT. The JVM's signal handler sees the trigger and starts its
// attach listener on the Unix socket /tmp/.java_pid<nspid>. The JVM accepts a connection only from its own
// effective uid and gid (or root, from JDK 9 on). A request is the protocol version "1" and exactly four
// strings, the command and three arguments, each terminated by a NUL byte. The reply is a decimal completion
// status on the first line, then the command's output.
//
// This package reaches the target through /proc/<pid>/root, which works across mount namespaces without setns,
// and resolves paths inside the target with openat2(RESOLVE_IN_ROOT), so a symbolic link planted in a container
// cannot redirect a write to the host. The socket is connected from a locked OS thread whose credentials are
// switched to the target's effective uid and gid with raw syscalls; that thread is never returned to the Go
// scheduler.
//
// Loading the Prometheus jmx_exporter agent into the wrong process, or loading it when it cannot start, is
// destructive: SIGQUIT kills a process that does not handle it, and jmx_exporter's own agent calls System.exit
// when it fails to start. Injector.Inject therefore checks everything it can before it sends the first signal:
// the port, for one, by binding it in the JVM's network namespace as the JVM would (CheckPort), an exporter
// already in the JVM, and the room under its container's memory limit. The project's own agent never ends the
// JVM and reports its verdict in a status file (AgentStatus), which Inject and Reconfigure read, so that a
// config the agent refuses is a named reason with the collector's own message.
//
// The jar and config are copied into a new directory with a random name, under a parent that only root or the
// JVM's user can change (or the pod's own emptyDir volume; a symbolic link on the way is resolved inside the
// JVM's root), and verified before the load, so that no other local user can swap the jar that the
// JVM, possibly root's, loads. A per-JVM lock file in the JVM's /tmp, trusted only when root or the JVM's user
// owns it and nobody else can open it, keeps two injectors (two operator replicas) from loading the agent twice.
//
// Run as the JVM's own uid and gid, nothing here needs a capability: the Pod Security "restricted" profile and
// pods/exec in the JVM's container are enough. Injector.Reconfigure replaces the configuration of an agent
// loaded before; WriteBundle and ReadBundle carry the jar and configuration over stdin; FormatTerminationLog
// fits every result into the 4,096 bytes of a Kubernetes termination message.
package jvm
