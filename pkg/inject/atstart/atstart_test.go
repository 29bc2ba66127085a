package atstart

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/jvm"
)

const testConfig = "rules:\n- pattern: \".*\"\n"

func testInput() Input {
	return Input{Exporter: "demo", Port: 9404, Config: []byte(testConfig), Image: "handlerkit/jmx-agent:test",
		PullPolicy: corev1.PullIfNotPresent}
}

func container(name string, env ...corev1.EnvVar) corev1.Container {
	return corev1.Container{Name: name, Image: "app:test", Env: env}
}

func newPod(cs ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec:       corev1.PodSpec{Containers: cs},
	}
}

// apply applies res's patch to pod as the API server does and returns the result.
func apply(t testing.TB, pod *corev1.Pod, res Result) *corev1.Pod {
	t.Helper()
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := res.PatchJSON()
	if err != nil {
		t.Fatal(err)
	}
	if raw == nil {
		return pod.DeepCopy()
	}
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		t.Fatalf("decode patch %s: %v", raw, err)
	}
	out, err := patch.Apply(doc)
	if err != nil {
		t.Fatalf("apply patch %s: %v", raw, err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

// leftAlone checks that res leaves pod without the agent: its patch at most
// annotates the pod with res's notes (AnnotationNotes), and changes nothing
// else.
func leftAlone(t *testing.T, pod *corev1.Pod, res Result) {
	t.Helper()
	if len(res.Injected) != 0 {
		t.Errorf("injected %+v", res.Injected)
	}
	got := apply(t, pod, res)
	want := pod.DeepCopy()
	if len(res.Notes) > 0 {
		if want.Annotations == nil {
			want.Annotations = map[string]string{}
		}
		want.Annotations[AnnotationNotes] = strings.Join(res.Notes, "\n")
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("patch %+v changes more than the notes annotation", res.Patch)
	}
}

func mutate(t testing.TB, pod *corev1.Pod, in Input) (*corev1.Pod, Result) {
	t.Helper()
	res, err := Mutate(pod, in)
	if err != nil {
		t.Fatalf("Mutate: %v", err)
	}
	return apply(t, pod, res), res
}

func env(c corev1.Container, name string) (corev1.EnvVar, int) {
	n := 0
	var last corev1.EnvVar
	for _, e := range c.Env {
		if e.Name == name {
			last = e
			n++
		}
	}
	return last, n
}

func TestMutateImageVolumeGivesEachContainerTheAgentAndTheConfig(t *testing.T) {
	pod := newPod(container("app"))
	got, res := mutate(t, pod, testInput())

	if len(got.Spec.Volumes) != 1 || got.Spec.Volumes[0].Name != VolumeName || got.Spec.Volumes[0].Image == nil {
		t.Fatalf("volumes = %+v", got.Spec.Volumes)
	}
	if iv := got.Spec.Volumes[0].Image; iv.Reference != "handlerkit/jmx-agent:test" || iv.PullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image volume = %+v", iv)
	}
	if len(got.Spec.InitContainers) != 0 {
		t.Errorf("init containers with an image volume: %+v", got.Spec.InitContainers)
	}
	app := got.Spec.Containers[0]
	if len(app.VolumeMounts) != 1 || app.VolumeMounts[0] != (corev1.VolumeMount{Name: VolumeName, MountPath: MountPath, ReadOnly: true}) {
		t.Errorf("mounts = %+v", app.VolumeMounts)
	}
	jto, n := env(app, JavaToolOptions)
	want := "-javaagent:/handlerkit/jmx-agent/opt/handlerkit/jmx-agent.jar=9404:env:HANDLERKIT_JMX_CONFIG"
	if n != 1 || jto.Value != want {
		t.Errorf("JAVA_TOOL_OPTIONS = %q (%d entries), want %q", jto.Value, n, want)
	}
	cfg, n := env(app, ConfigEnv)
	if n != 1 || !strings.HasPrefix(cfg.Value, jvm.ConfigEnvGzipPrefix) {
		t.Fatalf("%s = %q (%d entries)", ConfigEnv, cfg.Value, n)
	}
	if data, err := jvm.DecodeConfigEnv(cfg.Value); err != nil || string(data) != testConfig {
		t.Errorf("config decodes to %q, %v", data, err)
	}
	rec, ok, err := ParseRecord(got)
	if err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	wantRec := Record{Exporter: "demo", Containers: []string{"app"}, Port: 9404, Ports: map[string]int32{"app": 9404},
		ConfigHash: ConfigHash([]byte(testConfig)), Delivery: DeliveryImageVolume}
	if b1, b2 := mustJSON(t, rec), mustJSON(t, wantRec); b1 != b2 {
		t.Errorf("record = %s, want %s", b1, b2)
	}
	if len(rec.ConfigHash) != 16 {
		t.Errorf("configHash %q is not 16 hex digits", rec.ConfigHash)
	}
	if len(res.Injected) != 1 || res.Injected[0] != (Injected{Container: "app", Port: 9404}) {
		t.Errorf("injected = %+v", res.Injected)
	}
	if len(res.Notes) != 0 {
		t.Errorf("notes = %q", res.Notes)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMutateAppendsToTheUsersJavaToolOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []corev1.EnvVar
		want string
	}{
		{"literal", []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: JavaToolOptions, Value: "-Dfoo=bar -Xss1m  "}},
			"-Dfoo=bar -Xss1m -javaagent:/handlerkit/jmx-agent/opt/handlerkit/jmx-agent.jar=9404:env:HANDLERKIT_JMX_CONFIG"},
		{"empty entry", []corev1.EnvVar{{Name: JavaToolOptions}},
			"-javaagent:/handlerkit/jmx-agent/opt/handlerkit/jmx-agent.jar=9404:env:HANDLERKIT_JMX_CONFIG"},
		// Kubernetes applies the last of two entries of one name: that is the one extended.
		{"twice", []corev1.EnvVar{{Name: JavaToolOptions, Value: "-Dfirst"}, {Name: JavaToolOptions, Value: "-Dsecond"}},
			"-Dsecond -javaagent:/handlerkit/jmx-agent/opt/handlerkit/jmx-agent.jar=9404:env:HANDLERKIT_JMX_CONFIG"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod(container("app", tc.env...))
			got, res := mutate(t, pod, testInput())
			app := got.Spec.Containers[0]
			if app.Env[len(tc.env)-1].Name != JavaToolOptions || app.Env[len(tc.env)-1].Value != tc.want {
				t.Errorf("env = %+v, want the last JAVA_TOOL_OPTIONS %q", app.Env, tc.want)
			}
			if _, n := env(app, JavaToolOptions); n != countName(tc.env, JavaToolOptions) {
				t.Errorf("JAVA_TOOL_OPTIONS entries = %d, want %d (none added)", n, countName(tc.env, JavaToolOptions))
			}
			if len(res.Injected) != 1 {
				t.Errorf("injected = %+v, notes %q", res.Injected, res.Notes)
			}
		})
	}
}

func countName(env []corev1.EnvVar, name string) int {
	n := 0
	for _, e := range env {
		if e.Name == name {
			n++
		}
	}
	return n
}

func TestMutateLeavesAValueFromJavaToolOptionsAlone(t *testing.T) {
	pod := newPod(
		container("app", corev1.EnvVar{Name: JavaToolOptions, ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "opts"}, Key: "jto"}}}),
		container("other"))
	got, res := mutate(t, pod, testInput())
	if _, n := env(got.Spec.Containers[0], ConfigEnv); n != 0 || len(got.Spec.Containers[0].VolumeMounts) != 0 {
		t.Errorf("app was injected: %+v", got.Spec.Containers[0])
	}
	if len(res.Injected) != 1 || res.Injected[0].Container != "other" {
		t.Errorf("injected = %+v", res.Injected)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "container app sets JAVA_TOOL_OPTIONS from valueFrom; left alone, not injected") {
		t.Errorf("notes = %q", res.Notes)
	}
	// Alone in its pod: nothing but the note, in the pod's annotation.
	alone := newPod(pod.Spec.Containers[0])
	res, err := Mutate(alone, testInput())
	if err != nil || len(res.Notes) != 1 {
		t.Fatalf("Mutate = %+v, %v; want a note", res, err)
	}
	leftAlone(t, alone, res)
}

func TestMutateEnvFromThatMaySetJavaToolOptions(t *testing.T) {
	cm := func(name, prefix string) corev1.EnvFromSource {
		return corev1.EnvFromSource{Prefix: prefix, ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
	}
	for _, tc := range []struct {
		name     string
		envFrom  []corev1.EnvFromSource
		env      []corev1.EnvVar
		injected bool
		note     string
	}{
		{"no prefix", []corev1.EnvFromSource{cm("settings", "")}, nil, false, "envFrom ConfigMap settings, which may set JAVA_TOOL_OPTIONS"},
		{"a prefix that begins the name", []corev1.EnvFromSource{cm("settings", "JAVA_")}, nil, false, "envFrom ConfigMap settings"},
		{"a secret", []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}}, nil, false, "envFrom Secret s"},
		{"a prefix that cannot make the name", []corev1.EnvFromSource{cm("settings", "APP_")}, nil, true, ""},
		{"an explicit env entry wins over envFrom", []corev1.EnvFromSource{cm("settings", "")},
			[]corev1.EnvVar{{Name: JavaToolOptions, Value: "-Dx=y"}}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := container("app", tc.env...)
			c.EnvFrom = tc.envFrom
			pod := newPod(c)
			res, err := Mutate(pod, testInput())
			if err != nil {
				t.Fatal(err)
			}
			if got := len(res.Injected) == 1; got != tc.injected {
				t.Fatalf("injected = %v, want %v; notes %q", got, tc.injected, res.Notes)
			}
			if tc.note != "" && (len(res.Notes) != 1 || !strings.Contains(res.Notes[0], tc.note)) {
				t.Errorf("notes = %q, want one with %q", res.Notes, tc.note)
			}
			if !tc.injected {
				leftAlone(t, pod, res)
			}
		})
	}
}

func TestMutateNeverInjectsTwice(t *testing.T) {
	for _, d := range []Delivery{DeliveryImageVolume, DeliveryInitContainer} {
		t.Run(string(d), func(t *testing.T) {
			in := testInput()
			in.Delivery = d
			pod := newPod(container("app", corev1.EnvVar{Name: JavaToolOptions, Value: "-Dfoo=bar"}))
			once, _ := mutate(t, pod, in)
			res, err := Mutate(once, in)
			if err != nil || len(res.Patch) != 0 {
				t.Fatalf("second Mutate = %+v, %v; want no patch", res, err)
			}
			if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "already injected at start (annotation") {
				t.Errorf("notes = %q", res.Notes)
			}
			// Each sign alone is enough: the pod re-submitted without the annotation, or with only the option.
			noAnnotation := once.DeepCopy()
			delete(noAnnotation.Annotations, AnnotationInjected)
			if res, _ := Mutate(noAnnotation, in); len(res.Patch) != 0 || !strings.Contains(strings.Join(res.Notes, ""), "volume "+VolumeName) {
				t.Errorf("without the annotation: %+v", res)
			}
			onlyOption := noAnnotation.DeepCopy()
			onlyOption.Spec.Volumes = nil
			if res, _ := Mutate(onlyOption, in); len(res.Patch) != 0 || !strings.Contains(strings.Join(res.Notes, ""), "loads an agent from "+MountPath) {
				t.Errorf("with only the option: %+v", res)
			}
		})
	}
}

func TestMutateGivesEachContainerAPortNoContainerDeclares(t *testing.T) {
	a := container("a")
	a.Ports = []corev1.ContainerPort{{ContainerPort: 9404}, {ContainerPort: 9406, Protocol: corev1.ProtocolUDP}}
	b := container("b")
	b.Ports = []corev1.ContainerPort{{ContainerPort: 9405, Protocol: corev1.ProtocolTCP}}
	c := container("c")
	sidecar := container("log-shipper")
	sidecar.Ports = []corev1.ContainerPort{{ContainerPort: 9407}}
	pod := newPod(a, b, c)
	pod.Spec.InitContainers = []corev1.Container{sidecar}
	got, res := mutate(t, pod, testInput())
	want := []Injected{{"a", 9406}, {"b", 9408}, {"c", 9409}}
	if mustJSON(t, res.Injected) != mustJSON(t, want) {
		t.Errorf("injected = %+v, want %+v", res.Injected, want)
	}
	for i, w := range want {
		jto, _ := env(got.Spec.Containers[i], JavaToolOptions)
		if !strings.HasSuffix(jto.Value, "="+itoa(w.Port)+":env:"+ConfigEnv) {
			t.Errorf("container %s: JAVA_TOOL_OPTIONS = %q, want port %d", w.Container, jto.Value, w.Port)
		}
	}
	rec, _, _ := ParseRecord(got)
	if rec.Port != 9404 || rec.Ports["a"] != 9406 || rec.Ports["c"] != 9409 || strings.Join(rec.Containers, ",") != "a,b,c" {
		t.Errorf("record = %+v", rec)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "port 9404 is declared by container a, so its agent serves on 9406") {
		t.Errorf("notes = %q", res.Notes)
	}
}

func itoa(p int32) string { b, _ := json.Marshal(p); return string(b) }

func TestMutateOnlyTheSelectedContainers(t *testing.T) {
	in := testInput()
	in.Containers = []string{"b", "missing"}
	got, res := mutate(t, newPod(container("a"), container("b")), in)
	if len(res.Injected) != 1 || res.Injected[0] != (Injected{"b", 9404}) {
		t.Errorf("injected = %+v", res.Injected)
	}
	if _, n := env(got.Spec.Containers[0], ConfigEnv); n != 0 {
		t.Errorf("container a was injected")
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "container missing, selected by exporter demo, is not in the pod") {
		t.Errorf("notes = %q", res.Notes)
	}
}

func TestMutateInitContainerDelivery(t *testing.T) {
	in := testInput()
	in.Delivery = DeliveryInitContainer
	pod := newPod(container("app"))
	pod.Spec.InitContainers = []corev1.Container{container("migrate")}
	pod.Spec.Volumes = []corev1.Volume{{Name: "data"}}
	pod.Annotations = map[string]string{"a/b": "c"}
	got, _ := mutate(t, pod, in)

	if len(got.Spec.Volumes) != 2 || got.Spec.Volumes[1].EmptyDir == nil || got.Spec.Volumes[1].EmptyDir.SizeLimit.String() != "64Mi" {
		t.Fatalf("volumes = %+v", got.Spec.Volumes)
	}
	if len(got.Spec.InitContainers) != 2 || got.Spec.InitContainers[0].Name != InitContainerName || got.Spec.InitContainers[1].Name != "migrate" {
		t.Fatalf("init containers = %+v", got.Spec.InitContainers)
	}
	ic := got.Spec.InitContainers[0]
	if strings.Join(ic.Command, " ") != "/usr/local/bin/jmx-attach copy-agent --from /opt/handlerkit/jmx-agent.jar --to /handlerkit/jmx-agent" {
		t.Errorf("command = %q", ic.Command)
	}
	if ic.Image != in.Image || ic.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image = %s %s", ic.Image, ic.ImagePullPolicy)
	}
	if len(ic.VolumeMounts) != 1 || ic.VolumeMounts[0].ReadOnly || ic.VolumeMounts[0].MountPath != MountPath {
		t.Errorf("init container mounts = %+v", ic.VolumeMounts)
	}
	sc := ic.SecurityContext
	if sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("security context = %+v", sc)
	}
	if ic.Resources.Limits.Memory().String() != "64Mi" || ic.Resources.Requests.Cpu().String() != "10m" {
		t.Errorf("resources = %+v", ic.Resources)
	}
	jto, _ := env(got.Spec.Containers[0], JavaToolOptions)
	if jto.Value != "-javaagent:/handlerkit/jmx-agent/jmx-agent.jar=9404:env:HANDLERKIT_JMX_CONFIG" {
		t.Errorf("JAVA_TOOL_OPTIONS = %q", jto.Value)
	}
	if got.Annotations["a/b"] != "c" || got.Annotations[AnnotationInjected] == "" {
		t.Errorf("annotations = %v", got.Annotations)
	}

	// A pod that runs as root on purpose: a container-level runAsNonRoot would keep it from starting.
	root := int64(0)
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &root}
	got, _ = mutate(t, pod, in)
	if got.Spec.InitContainers[0].SecurityContext.RunAsNonRoot != nil {
		t.Errorf("runAsNonRoot set in a pod running as root")
	}
}

func TestMutateLeavesOddPodsAndContainersAlone(t *testing.T) {
	win := newPod(container("app"))
	win.Spec.OS = &corev1.PodOS{Name: corev1.Windows}
	withExporter := container("app")
	withExporter.Args = []string{"-javaagent:/opt/jmx_prometheus_javaagent-1.0.1.jar=9404:/c.yaml", "-jar", "app.jar"}
	inJDKOpts := container("app", corev1.EnvVar{Name: "JDK_JAVA_OPTIONS", Value: "-javaagent:/jmx_prometheus_javaagent.jar=1:/c"})
	ownEnv := container("app", corev1.EnvVar{Name: ConfigEnv, Value: "x"})
	mounted := container("app")
	mounted.VolumeMounts = []corev1.VolumeMount{{Name: "other", MountPath: MountPath + "/"}}
	clash := newPod(container("app"))
	clash.Spec.InitContainers = []corev1.Container{container(InitContainerName)}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		delivery Delivery
		note     string
	}{
		{"windows", win, "", "runs on Windows"},
		{"jmx_exporter in args", newPod(withExporter), "", "already loads jmx_exporter (-javaagent:/opt/jmx_prometheus"},
		{"jmx_exporter in JDK_JAVA_OPTIONS", newPod(inJDKOpts), "", "already loads jmx_exporter (JDK_JAVA_OPTIONS)"},
		{"config variable defined", newPod(ownEnv), "", "already defines " + ConfigEnv},
		{"mount path taken", newPod(mounted), "", "already mounts a volume at " + MountPath},
		{"init container name taken", clash, DeliveryInitContainer, "already has an init container named " + InitContainerName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testInput()
			in.Delivery = tc.delivery
			res, err := Mutate(tc.pod, in)
			if err != nil {
				t.Fatal(err)
			}
			leftAlone(t, tc.pod, res)
			if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], tc.note) {
				t.Errorf("notes = %q, want %q", res.Notes, tc.note)
			}
		})
	}
}

func TestMutateNotesHostNetwork(t *testing.T) {
	pod := newPod(container("app"))
	pod.Spec.HostNetwork = true
	res, err := Mutate(pod, testInput())
	if err != nil || len(res.Injected) != 1 || len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "host's network") {
		t.Errorf("Mutate = %+v, %v", res, err)
	}
}

func TestMutateRefusesAnUnusableInput(t *testing.T) {
	big := make([]byte, 300<<10)
	for _, tc := range []struct {
		name string
		edit func(*Input)
		want string
	}{
		{"no exporter", func(in *Input) { in.Exporter = "" }, "exporter's name is empty"},
		{"port 0", func(in *Input) { in.Port = 0 }, "port 0 is not between"},
		{"port 70000", func(in *Input) { in.Port = 70000 }, "port 70000"},
		{"no image", func(in *Input) { in.Image = "" }, "agent image is empty"},
		{"pull policy", func(in *Input) { in.PullPolicy = "Sometimes" }, `pull policy "Sometimes"`},
		{"delivery", func(in *Input) { in.Delivery = "Carrier" }, `delivery "Carrier"`},
		{"relative path", func(in *Input) { in.AgentPath = "opt/a.jar" }, "agent path"},
		{"path with a space", func(in *Input) { in.AgentPath = "/opt/my agent.jar" }, "agent path"},
		{"path with =", func(in *Input) { in.AgentPath = "/opt/a=b.jar" }, "agent path"},
		{"unclean path", func(in *Input) { in.AgentPath = "/opt/../a.jar" }, "agent path"},
		{"config too large", func(in *Input) { in.Config = big }, "more than the 262144"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testInput()
			tc.edit(&in)
			res, err := Mutate(newPod(container("app")), in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
			if len(res.Patch) != 0 {
				t.Errorf("patch with an error: %+v", res.Patch)
			}
		})
	}
	if _, err := Mutate(nil, testInput()); err == nil {
		t.Error("Mutate(nil) succeeded")
	}
}

func TestDefaultAgentPathIsTheOperators(t *testing.T) {
	if DefaultAgentPath != jmxv1alpha1.DefaultAgentPath {
		t.Errorf("DefaultAgentPath = %s, the operator's is %s", DefaultAgentPath, jmxv1alpha1.DefaultAgentPath)
	}
}

func TestPatchEscapesTheAnnotationKey(t *testing.T) {
	pod := newPod(container("app"))
	pod.Annotations = map[string]string{"team": "a"}
	res, err := Mutate(pod, testInput())
	if err != nil {
		t.Fatal(err)
	}
	if p := res.Patch[0].Path; p != "/metadata/annotations/jmx.handlerkit.dev~1injected-at-start" {
		t.Errorf("annotation path = %s", p)
	}
	for _, op := range res.Patch {
		if op.Op != "add" {
			t.Errorf("op %+v is not add", op)
		}
	}
	if got := apply(t, pod, res); got.Annotations["team"] != "a" || got.Annotations[AnnotationInjected] == "" {
		t.Errorf("annotations = %v", got.Annotations)
	}
}

// Empty lists and maps are absent from a pod's JSON (omitempty): the patch adds them whole.
func TestPatchAppliesToEmptyListsAndMaps(t *testing.T) {
	for _, d := range []Delivery{DeliveryImageVolume, DeliveryInitContainer} {
		c := container("app")
		c.Env, c.VolumeMounts = []corev1.EnvVar{}, []corev1.VolumeMount{}
		pod := newPod(c)
		pod.Annotations, pod.Spec.Volumes, pod.Spec.InitContainers = map[string]string{}, []corev1.Volume{}, []corev1.Container{}
		in := testInput()
		in.Delivery = d
		got, res := mutate(t, pod, in)
		if len(res.Injected) != 1 || len(got.Spec.Volumes) != 1 || len(got.Spec.Containers[0].Env) != 2 {
			t.Errorf("%s: injected %+v into %+v", d, res.Injected, got.Spec)
		}
	}
}
