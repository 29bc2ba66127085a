package atstart

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// kubeletEnv is a container's environment as the kubelet gives it to the process: a fieldRef to status.podIP
// resolves to podIP, and $(NAME) in a value expands from variables defined earlier in the list ($$ is a $; an
// unknown name stays as written). Only the cases Mutate produces are handled; anything else fails the test.
func kubeletEnv(t testing.TB, c corev1.Container, podIP string) map[string]string {
	t.Helper()
	vals := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "status.podIP" {
				t.Fatalf("env %s: valueFrom %+v is not a fieldRef to status.podIP", e.Name, e.ValueFrom)
			}
			vals[e.Name] = podIP
			continue
		}
		var b strings.Builder
		for i := 0; i < len(v); i++ {
			switch {
			case strings.HasPrefix(v[i:], "$$"):
				b.WriteByte('$')
				i++
			case strings.HasPrefix(v[i:], "$("):
				end := strings.IndexByte(v[i:], ')')
				if end < 0 {
					b.WriteString(v[i:])
					i = len(v)
					continue
				}
				name := v[i+2 : i+end]
				if known, ok := vals[name]; ok {
					b.WriteString(known)
				} else {
					b.WriteString(v[i : i+end+1])
				}
				i += end
			default:
				b.WriteByte(v[i])
			}
		}
		vals[e.Name] = b.String()
	}
	return vals
}

// A pod that uses the host's network gets an agent that binds the pod's IP, not every address of the node: the
// pod's IP comes from the downward API in a variable defined before JAVA_TOOL_OPTIONS (whether the container set
// JAVA_TOOL_OPTIONS or not), in brackets so that an IPv6 address parses too.
func TestMutateBindsThePodIPOfAHostNetworkPod(t *testing.T) {
	jar := MountPath + DefaultAgentPath
	for _, tc := range []struct {
		name, podIP, want string
		env               []corev1.EnvVar
	}{
		{name: "IPv4", podIP: "10.1.2.3", want: "-javaagent:" + jar + "=[10.1.2.3]:9404:env:" + ConfigEnv},
		{name: "IPv6", podIP: "fd00:10::3", want: "-javaagent:" + jar + "=[fd00:10::3]:9404:env:" + ConfigEnv},
		{name: "the container's own JAVA_TOOL_OPTIONS", podIP: "10.1.2.3",
			env:  []corev1.EnvVar{{Name: JavaToolOptions, Value: "-Xmx64m"}, {Name: "OTHER", Value: "x"}},
			want: "-Xmx64m -javaagent:" + jar + "=[10.1.2.3]:9404:env:" + ConfigEnv},
		{name: "JAVA_TOOL_OPTIONS after other variables", podIP: "fd00:10::3",
			env:  []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: JavaToolOptions, Value: "-Da=$(A)"}},
			want: "-Da=1 -javaagent:" + jar + "=[fd00:10::3]:9404:env:" + ConfigEnv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod(container("app", tc.env...))
			pod.Spec.HostNetwork = true
			got, res := mutate(t, pod, testInput())
			if len(res.Injected) != 1 {
				t.Fatalf("not injected: %q", res.Notes)
			}
			c := got.Spec.Containers[0]
			host, jto := -1, -1
			for i, e := range c.Env {
				switch e.Name {
				case HostEnv:
					host = i
				case JavaToolOptions:
					jto = i
				}
			}
			if host < 0 || jto < 0 || host > jto {
				t.Fatalf("%s at %d, %s at %d in %+v: want the host's variable first", HostEnv, host, JavaToolOptions, jto, c.Env)
			}
			if v := kubeletEnv(t, c, tc.podIP)[JavaToolOptions]; v != tc.want {
				t.Errorf("%s as the JVM reads it = %q, want %q", JavaToolOptions, v, tc.want)
			}
			for _, e := range tc.env {
				if got, _ := env(c, e.Name); e.Name != JavaToolOptions && got.Value != e.Value {
					t.Errorf("env %s = %q, want %q kept", e.Name, got.Value, e.Value)
				}
			}
		})
	}
	// A pod with its own network: every address of its own namespace, as before.
	got, _ := mutate(t, newPod(container("app")), testInput())
	if e, n := env(got.Spec.Containers[0], HostEnv); n != 0 {
		t.Errorf("a pod with its own network got %+v", e)
	}
	if e, _ := env(got.Spec.Containers[0], JavaToolOptions); e.Value != AgentOption(jar, 9404) {
		t.Errorf("%s = %q", JavaToolOptions, e.Value)
	}
	// A container that defines the variable itself is left alone rather than given an address of its choosing.
	pod := newPod(container("app", corev1.EnvVar{Name: HostEnv, Value: "0.0.0.0"}))
	pod.Spec.HostNetwork = true
	if res, err := Mutate(pod, testInput()); err != nil || len(res.Injected) != 0 || !strings.Contains(strings.Join(res.Notes, "\n"), "already defines "+HostEnv) {
		t.Errorf("Mutate = %+v, %v", res, err)
	}
}

// The agent of a hostNetwork pod, started from the environment the kubelet gives the container (its pod IP here
// 127.0.0.2, an address of lo), serves on that address only: 127.0.0.1, another address of the same namespace,
// has nothing on the port.
func TestAtStartHostNetworkAgentListensOnThePodIPOnly(t *testing.T) {
	j := jdks(t)[0]
	p := port(t)
	in := testInput()
	in.Port, in.Config = p, []byte(jvmConfig)
	pod := newPod(container("app"))
	pod.Spec.HostNetwork = true
	got, res := mutate(t, pod, in)
	if len(res.Injected) != 1 {
		t.Fatalf("not injected: %q", res.Notes)
	}
	jar := agentJar(t)
	var env []string
	for k, v := range kubeletEnv(t, got.Spec.Containers[0], "127.0.0.2") {
		env = append(env, k+"="+strings.ReplaceAll(v, MountPath+DefaultAgentPath, jar))
	}
	jvm := startJVM(t, j.java, env)
	lines := agentLines(t, jvm.Output, 1)
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), 5*time.Second); err == nil {
		c.Close()
		t.Errorf("127.0.0.1:%d accepts a connection: the agent binds more than the pod's IP", p)
	}
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.2:%d", p), 5*time.Second)
	if err != nil {
		t.Fatalf("the pod's IP: %v\n%s", err, jvm.Output())
	}
	c.Close()
	if len(lines) != 1 || !strings.Contains(lines[0], "serving on 127.0.0.2:"+strconv.Itoa(int(p))) {
		t.Errorf("agent lines = %q", lines)
	}
}
