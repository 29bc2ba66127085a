package atstart

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

const testAgentOption = "-javaagent:/handlerkit/jmx-agent/opt/handlerkit/jmx-agent.jar=9404:env:HANDLERKIT_JMX_CONFIG"

func imageSets(vars ...string) ImageEnv {
	ie := ImageEnv{Env: map[string]string{}}
	for i := 0; i+1 < len(vars); i += 2 {
		ie.Env[vars[i]] = vars[i+1]
	}
	return ie
}

func TestMutateKeepsTheImagesJavaToolOptionsBeforeTheAgents(t *testing.T) {
	pod := newPod(container("app"))
	in := testInput()
	in.ImageEnv = map[string]ImageEnv{"app": imageSets(JavaToolOptions, "  -Dmarker=1 -Xmx40m ")}
	got, res := mutate(t, pod, in)
	if len(res.Injected) != 1 {
		t.Fatalf("injected %+v, notes %q", res.Injected, res.Notes)
	}
	jto, n := env(got.Spec.Containers[0], JavaToolOptions)
	if want := "-Dmarker=1 -Xmx40m " + testAgentOption; n != 1 || jto.Value != want {
		t.Errorf("JAVA_TOOL_OPTIONS = %q (%d entries), want %q", jto.Value, n, want)
	}
	if len(res.Notes) != 0 {
		t.Errorf("notes %q, want none", res.Notes)
	}
}

// The kubelet expands $(VAR) in an env value and reads $$ as $; the JVM read
// the image's value as it is, so each $ is doubled.
func TestMutateEscapesTheDollarsOfTheImagesJavaToolOptions(t *testing.T) {
	pod := newPod(container("app"))
	in := testInput()
	in.ImageEnv = map[string]ImageEnv{"app": imageSets(JavaToolOptions, "-Dhome=$(HOME) -Dprice=$5 -Dd=$$")}
	got, _ := mutate(t, pod, in)
	jto, _ := env(got.Spec.Containers[0], JavaToolOptions)
	if want := "-Dhome=$$(HOME) -Dprice=$$5 -Dd=$$$$ " + testAgentOption; jto.Value != want {
		t.Errorf("JAVA_TOOL_OPTIONS = %q, want %q", jto.Value, want)
	}
}

// A pod's own JAVA_TOOL_OPTIONS replaces the image's: it is what the JVM
// would read without the webhook, so the image's value is not added.
func TestMutateThePodsJavaToolOptionsWinsOverTheImages(t *testing.T) {
	pod := newPod(container("app", corev1.EnvVar{Name: JavaToolOptions, Value: "-Xmx64m"}))
	in := testInput()
	in.ImageEnv = map[string]ImageEnv{"app": imageSets(JavaToolOptions, "-Dmarker=1 -javaagent:/opt/jmx_prometheus_javaagent.jar=9999:c.yaml")}
	got, res := mutate(t, pod, in)
	jto, _ := env(got.Spec.Containers[0], JavaToolOptions)
	if want := "-Xmx64m " + testAgentOption; jto.Value != want || len(res.Injected) != 1 {
		t.Errorf("JAVA_TOOL_OPTIONS = %q (injected %+v), want %q", jto.Value, res.Injected, want)
	}
}

func TestMutateLeavesAnImageThatLoadsJmxExporterAlone(t *testing.T) {
	for name, ie := range map[string]ImageEnv{
		"JAVA_TOOL_OPTIONS": imageSets(JavaToolOptions, "-Xmx40m -javaagent:/opt/jmx_prometheus_javaagent-1.0.1.jar=9404:/etc/c.yaml"),
		"JDK_JAVA_OPTIONS":  imageSets("JDK_JAVA_OPTIONS", "-javaagent:/opt/jmx_prometheus_javaagent.jar=9404:c.yaml"),
		"our agent":         imageSets(JavaToolOptions, "-javaagent:/handlerkit/jmx-agent/x.jar=9404:env:HANDLERKIT_JMX_CONFIG"),
		"entrypoint":        {Agents: []string{"-javaagent:/opt/jmx_prometheus_javaagent.jar=9404:c.yaml"}},
	} {
		t.Run(name, func(t *testing.T) {
			pod := newPod(container("app"))
			in := testInput()
			in.ImageEnv = map[string]ImageEnv{"app": ie}
			res, err := Mutate(pod, in)
			if err != nil {
				t.Fatal(err)
			}
			leftAlone(t, pod, res)
			if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "container app has an image that already loads") ||
				!strings.Contains(res.Notes[0], "left alone") {
				t.Errorf("notes %q", res.Notes)
			}
		})
	}
}

func TestMutateUnreadableImageConfig(t *testing.T) {
	unreadable := map[string]ImageEnv{"app": {Err: "GET https://r.test/v2/: connection refused"}}
	t.Run("Inject", func(t *testing.T) {
		pod := newPod(container("app"))
		in := testInput()
		in.ImageEnv = unreadable
		got, res := mutate(t, pod, in)
		jto, _ := env(got.Spec.Containers[0], JavaToolOptions)
		if len(res.Injected) != 1 || jto.Value != testAgentOption {
			t.Fatalf("injected %+v, JAVA_TOOL_OPTIONS %q", res.Injected, jto.Value)
		}
		if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "connection refused") ||
			!strings.Contains(res.Notes[0], "the agent's option replaces it") {
			t.Errorf("notes %q", res.Notes)
		}
		if got.Annotations[AnnotationNotes] != strings.Join(res.Notes, "\n") || len(res.Notes) == 0 {
			t.Errorf("annotation %s = %q, want the note", AnnotationNotes, got.Annotations[AnnotationNotes])
		}
	})
	t.Run("Skip", func(t *testing.T) {
		pod := newPod(container("app"))
		in := testInput()
		in.ImageEnv, in.Unreadable = unreadable, UnreadableSkip
		res, err := Mutate(pod, in)
		if err != nil {
			t.Fatal(err)
		}
		leftAlone(t, pod, res)
		if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "could not be read") || !strings.Contains(res.Notes[0], "left alone") {
			t.Errorf("notes %q", res.Notes)
		}
	})
	t.Run("SkipButThePodSetsJavaToolOptions", func(t *testing.T) {
		pod := newPod(container("app", corev1.EnvVar{Name: JavaToolOptions, Value: "-Xmx64m"}))
		in := testInput()
		in.ImageEnv, in.Unreadable = unreadable, UnreadableSkip
		if _, res := mutate(t, pod, in); len(res.Injected) != 1 || len(res.Notes) != 0 {
			t.Errorf("injected %+v, notes %q; want injected without a note", res.Injected, res.Notes)
		}
	})
	t.Run("UnknownPolicy", func(t *testing.T) {
		in := testInput()
		in.Unreadable = "Maybe"
		if _, err := Mutate(newPod(container("app")), in); err == nil {
			t.Error("no error for an unknown policy")
		}
	})
}
