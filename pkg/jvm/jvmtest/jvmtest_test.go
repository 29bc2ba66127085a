package jvmtest

import (
	"archive/zip"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestBuildTestAgentWritesAgentClassManifest(t *testing.T) {
	jar, err := BuildTestAgent(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.OpenReader(jar)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var manifest string
	var hasClass bool
	for _, f := range zr.File {
		switch {
		case f.Name == "META-INF/MANIFEST.MF":
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			manifest = string(b)
		case f.Name == strings.ReplaceAll(TestAgentClass, ".", "/")+".class":
			hasClass = true
		}
	}
	if !strings.Contains(manifest, "Agent-Class: "+TestAgentClass+"\r\n") {
		t.Errorf("manifest lacks Agent-Class: %q", manifest)
	}
	if !hasClass {
		t.Errorf("jar lacks the compiled agent class")
	}
}

func TestStartJVMRunsSampleAppUntilStopped(t *testing.T) {
	app, err := BuildSampleApp(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(app.Jar); err != nil {
		t.Fatal(err)
	}
	j := StartJVM(t, Options{App: app})
	if !j.Alive() {
		t.Fatalf("JVM %d not alive after ready line", j.Pid)
	}
	if err := j.Stop(); err != nil {
		t.Fatal(err)
	}
	if j.Alive() {
		t.Fatalf("JVM %d still alive after Stop", j.Pid)
	}
	if _, err := os.Stat(j.WorkDir); !os.IsNotExist(err) {
		t.Errorf("work dir %s left behind: %v", j.WorkDir, err)
	}
}

func TestStartJVMInPrivateNamespacesGetsPidOne(t *testing.T) {
	app, err := BuildSampleApp(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	j := StartJVM(t, Options{App: app, PrivateNamespaces: true})
	status, err := os.ReadFile("/proc/" + itoa(j.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var nspid string
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "NSpid:") {
			f := strings.Fields(line)
			nspid = f[len(f)-1]
		}
	}
	if nspid != "1" {
		t.Fatalf("nspid = %q, want 1", nspid)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestJMXExporterJarIsTheRealAgent(t *testing.T) {
	// A cache of its own: the corruption below must not reach other test
	// binaries that read the shared cache meanwhile.
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	jar, err := JMXExporterJar(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSHA256(jar, JMXExporterSHA256); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.OpenReader(jar)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	f, err := zr.Open("META-INF/MANIFEST.MF")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	if !strings.Contains(string(b), "Agent-Class: "+JMXExporterAgentClass) {
		t.Fatalf("manifest has no Agent-Class %s:\n%s", JMXExporterAgentClass, b)
	}
	// A corrupted cache entry is replaced, not trusted.
	if err := os.WriteFile(jar, []byte("not a jar"), 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := JMXExporterJar(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSHA256(again, JMXExporterSHA256); err != nil {
		t.Fatalf("corrupted jar not fetched again: %v", err)
	}
}

// TestCompiledClassesAreTakenFromTheCache: the first build compiles with
// javac and keeps the classes in the cache; a second build of the same
// sources copies them from there (a file added to the cache entry shows up in
// the second build) and its jar still runs as the sample application.
func TestCompiledClassesAreTakenFromTheCache(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	first, err := BuildSampleApp(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(cache, "handlerkit", "javac")
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, e := range entries {
		kept = append(kept, e.Name())
	}
	if len(kept) != 1 {
		t.Fatalf("cache entries %v, want one for the sample application", kept)
	}
	entry := filepath.Join(root, kept[0])
	mainClass := filepath.FromSlash(strings.ReplaceAll(SampleMainClass, ".", "/") + ".class")
	for _, dir := range []string{first.ClassesDir, entry} {
		if _, err := os.Stat(filepath.Join(dir, mainClass)); err != nil {
			t.Fatalf("main class missing: %v", err)
		}
	}
	if err := os.WriteFile(filepath.Join(entry, "from-the-cache"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	second, err := BuildSampleApp(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(second.ClassesDir, "from-the-cache")); err != nil {
		t.Errorf("the second build did not copy the cache entry: %v", err)
	}
	want, _ := os.ReadFile(filepath.Join(first.ClassesDir, mainClass))
	got, _ := os.ReadFile(filepath.Join(second.ClassesDir, mainClass))
	if len(want) == 0 || string(got) != string(want) {
		t.Errorf("main class from the cache: %d bytes, javac wrote %d", len(got), len(want))
	}
	jvm := StartJVM(t, Options{App: second})
	if jvm.Pid <= 0 {
		t.Fatalf("sample application from cached classes: pid %d", jvm.Pid)
	}
}

// TestJVMsRunWithLightFlagsUnlessTheTestChoosesOtherwise: a JVM gets
// LightFlags before the test's own options; a test that chooses a collector
// gets the client compiler but not a second collector (which would stop the
// JVM: the real JVM below starts); DefaultCompilers leaves the JDK's
// defaults.
func TestJVMsRunWithLightFlagsUnlessTheTestChoosesOtherwise(t *testing.T) {
	cases := []struct {
		opts Options
		want []string
	}{
		{Options{JVMArgs: []string{"-Xmx64m"}}, []string{"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx64m"}},
		{Options{JVMArgs: []string{"-XX:+UseParallelGC"}}, []string{"-XX:TieredStopAtLevel=1", "-XX:+UseParallelGC"}},
		{Options{JVMArgs: []string{"-Xmx64m"}, DefaultCompilers: true}, []string{"-Xmx64m"}},
		{Options{DefaultCompilers: true}, nil},
	}
	for _, tc := range cases {
		if got := jvmOptions(tc.opts); !slices.Equal(got, tc.want) {
			t.Errorf("jvmOptions(%+v) = %q, want %q", tc.opts, got, tc.want)
		}
	}
	app, err := BuildSampleApp(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts       Options
		want, gone []string
	}{
		{Options{App: app, JVMArgs: []string{"-XX:+UseParallelGC"}}, []string{"-XX:TieredStopAtLevel=1", "-XX:+UseParallelGC"}, []string{"-XX:+UseSerialGC"}},
		{Options{App: app, DefaultCompilers: true}, nil, LightFlags},
	} {
		j := StartJVM(t, tc.opts)
		raw, err := os.ReadFile("/proc/" + strconv.Itoa(j.Pid) + "/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		cmdline := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		for _, f := range tc.want {
			if !slices.Contains(cmdline, f) {
				t.Errorf("JVM %v lacks %s", cmdline, f)
			}
		}
		for _, f := range tc.gone {
			if slices.Contains(cmdline, f) {
				t.Errorf("JVM %v has %s", cmdline, f)
			}
		}
	}
}
