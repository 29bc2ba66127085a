package imageenv

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"

	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
)

// testRegistry is a real registry (go-containerregistry's) on loopback that
// counts the manifest reads of each repository and can hold them until
// release is closed.
type testRegistry struct {
	host    string
	mu      sync.Mutex
	reads   map[string]int
	hold    atomic.Bool
	release chan struct{}
}

func newRegistry(t *testing.T) *testRegistry {
	t.Helper()
	r := &testRegistry{reads: map[string]int{}, release: make(chan struct{})}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if repo, _, ok := strings.Cut(strings.TrimPrefix(req.URL.Path, "/v2/"), "/manifests/"); ok && req.Method == http.MethodGet {
			r.mu.Lock()
			r.reads[repo]++
			r.mu.Unlock()
			if r.hold.Load() {
				select {
				case <-r.release:
				case <-req.Context().Done():
					return
				}
			}
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(func() {
		if r.hold.Load() {
			close(r.release)
		}
		srv.Close()
	})
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

func (r *testRegistry) readsOf(repo string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads[repo]
}

// push writes an image whose config sets env and entrypoint, and returns its
// reference by tag and by digest.
func (r *testRegistry) push(t *testing.T, repo string, env, entrypoint []string) (string, string) {
	t.Helper()
	img, err := mutate.Config(empty.Image, v1.Config{Env: env, Entrypoint: entrypoint})
	if err != nil {
		t.Fatal(err)
	}
	tag := r.host + "/" + repo + ":v1"
	ref, err := name.ParseReference(tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return tag, r.host + "/" + repo + "@" + d.String()
}

// fakeClock is the cache's clock, moved by the test.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newReader(t *testing.T, opts Options) (*Reader, *fakeClock) {
	t.Helper()
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	opts.Now = clock.Now
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r, clock
}

func TestLookupReadsTheImagesJavaOptions(t *testing.T) {
	reg := newRegistry(t)
	tag, digest := reg.push(t, "app", []string{"PATH=/usr/bin", "JAVA_TOOL_OPTIONS=-Dmarker=1 -Xmx40m", "JDK_JAVA_OPTIONS=-Da=$b"},
		[]string{"java", "-javaagent:/opt/jmx_prometheus_javaagent.jar=9404:c.yaml", "-jar", "app.jar"})
	r, _ := newReader(t, Options{})
	for _, ref := range []string{tag, digest} {
		ie := r.Lookup(t.Context(), ref)
		if ie.Err != "" {
			t.Fatalf("%s: %s", ref, ie.Err)
		}
		if got := ie.Env[atstart.JavaToolOptions]; got != "-Dmarker=1 -Xmx40m" {
			t.Errorf("%s: JAVA_TOOL_OPTIONS %q", ref, got)
		}
		if got := ie.Env["JDK_JAVA_OPTIONS"]; got != "-Da=$b" {
			t.Errorf("%s: JDK_JAVA_OPTIONS %q", ref, got)
		}
		if _, ok := ie.Env["PATH"]; ok || len(ie.Agents) != 1 || !strings.Contains(ie.Agents[0], "jmx_prometheus") {
			t.Errorf("%s: env %v agents %q; want only the JVM's variables and the one agent", ref, ie.Env, ie.Agents)
		}
	}
	plain, _ := reg.push(t, "plain", []string{"PATH=/usr/bin"}, nil)
	if ie := r.Lookup(t.Context(), plain); ie.Err != "" || len(ie.Env) != 0 {
		t.Errorf("an image without JVM options: %+v", ie)
	}
}

// A burst of pod creations reads each image once, concurrent lookups
// included, until the TTL passes.
func TestLookupReadsEachImageOnceWithinItsTTL(t *testing.T) {
	reg := newRegistry(t)
	tag, _ := reg.push(t, "burst", []string{"JAVA_TOOL_OPTIONS=-Xmx40m"}, nil)
	r, clock := newReader(t, Options{TTL: time.Minute})
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if ie := r.Lookup(t.Context(), tag); ie.Env[atstart.JavaToolOptions] != "-Xmx40m" {
				t.Errorf("lookup: %+v", ie)
			}
		})
	}
	wg.Wait()
	if n := reg.readsOf("burst"); n != 1 {
		t.Errorf("%d manifest reads for 20 lookups, want 1", n)
	}
	clock.add(59 * time.Second)
	r.Lookup(t.Context(), tag)
	if n := reg.readsOf("burst"); n != 1 {
		t.Errorf("%d manifest reads within the TTL, want 1", n)
	}
	clock.add(time.Second)
	r.Lookup(t.Context(), tag)
	if n := reg.readsOf("burst"); n != 2 {
		t.Errorf("%d manifest reads after the TTL, want 2", n)
	}
}

// A registry that does not answer costs one timeout per image and ErrorTTL:
// the lookup says so, and the next lookups get the kept failure at once.
func TestLookupOfARegistryThatDoesNotAnswer(t *testing.T) {
	reg := newRegistry(t)
	tag, _ := reg.push(t, "slow", []string{"JAVA_TOOL_OPTIONS=-Xmx40m"}, nil)
	reg.hold.Store(true)
	var logged atomic.Int32
	r, clock := newReader(t, Options{Timeout: 300 * time.Millisecond, ErrorTTL: time.Minute,
		Logf: func(string, ...any) { logged.Add(1) }})
	ie := r.Lookup(t.Context(), tag)
	if !strings.Contains(ie.Err, "no answer within 300ms") || ie.Env != nil {
		t.Fatalf("lookup of a registry that holds the read: %+v", ie)
	}
	reads := reg.readsOf("slow")
	if again := r.Lookup(t.Context(), tag); again.Err != ie.Err || reg.readsOf("slow") != reads {
		t.Errorf("second lookup %+v with %d reads (was %d), want the kept failure", again, reg.readsOf("slow"), reads)
	}
	if n := logged.Load(); n != 1 {
		t.Errorf("%d failed reads logged for one image, want 1", n)
	}
	clock.add(time.Minute)
	reg.hold.Store(false)
	if ie := r.Lookup(t.Context(), tag); ie.Err != "" || ie.Env[atstart.JavaToolOptions] != "-Xmx40m" {
		t.Errorf("lookup after ErrorTTL: %+v", ie)
	}
}

// A caller whose context ends stops waiting; what it stopped waiting for is
// not kept as a failure.
func TestLookupStopsWithItsContext(t *testing.T) {
	reg := newRegistry(t)
	tag, _ := reg.push(t, "held", nil, nil)
	reg.hold.Store(true)
	r, _ := newReader(t, Options{Timeout: time.Minute})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if ie := r.Lookup(ctx, tag); !strings.Contains(ie.Err, context.Canceled.Error()) {
		t.Errorf("lookup with an ended context: %+v", ie)
	}
}

func TestLookupOfARegistryThatRefuses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
	}))
	defer srv.Close()
	r, _ := newReader(t, Options{})
	ie := r.Lookup(t.Context(), strings.TrimPrefix(srv.URL, "http://")+"/private:v1")
	if !strings.Contains(ie.Err, "private") || !strings.Contains(strings.ToLower(ie.Err), "auth") {
		t.Errorf("lookup of a private image: %+v", ie)
	}
	if ie := r.Lookup(t.Context(), "Not A Reference"); ie.Err == "" {
		t.Errorf("lookup of a bad reference: %+v", ie)
	}
}

func TestTheCacheIsBounded(t *testing.T) {
	reg := newRegistry(t)
	r, clock := newReader(t, Options{MaxEntries: 3})
	var tags []string
	for _, repo := range []string{"a", "b", "c", "d", "e"} {
		tag, _ := reg.push(t, repo, nil, nil)
		tags = append(tags, tag)
		r.Lookup(t.Context(), tag)
		clock.add(time.Second)
		if r.Len() > 3 {
			t.Fatalf("%d entries, want at most 3", r.Len())
		}
	}
	// The oldest went first: "e" is still kept, "a" is read again.
	r.Lookup(t.Context(), tags[4])
	r.Lookup(t.Context(), tags[0])
	if reg.readsOf("e") != 1 || reg.readsOf("a") != 2 {
		t.Errorf("reads of e %d (want 1), of a %d (want 2)", reg.readsOf("e"), reg.readsOf("a"))
	}
}

// Chooser fills the Input of a pod the exporter wants with what its selected
// containers' images set, and Mutate keeps it.
func TestChooserPassesTheImagesOptionsToMutate(t *testing.T) {
	reg := newRegistry(t)
	withOpts, _ := reg.push(t, "opts", []string{"JAVA_TOOL_OPTIONS=-Dmarker=1 -Xmx40m"}, nil)
	r, _ := newReader(t, Options{})
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "app", Image: withOpts}, {Name: "side", Image: "127.0.0.1:1/never-read:v1"},
	}}}
	choose := Chooser(r, atstart.UnreadableSkip, func(context.Context, *corev1.Pod) (atstart.Input, bool, error) {
		return atstart.Input{Exporter: "demo", Port: 9404, Config: []byte("rules: []\n"), Image: "agent:v1", Containers: []string{"app"}}, true, nil
	})
	in, ok, err := choose(t.Context(), pod)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if len(in.ImageEnv) != 1 || in.ImageEnv["app"].Env[atstart.JavaToolOptions] != "-Dmarker=1 -Xmx40m" || in.Unreadable != atstart.UnreadableSkip {
		t.Fatalf("input %+v", in)
	}
	res, err := atstart.Mutate(pod, in)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range res.Patch {
		if e, ok := op.Value.([]corev1.EnvVar); ok && strings.HasPrefix(op.Path, "/spec/containers/0/env") {
			if want := "-Dmarker=1 -Xmx40m " + atstart.AgentOption(atstart.MountPath+atstart.DefaultAgentPath, 9404); e[0].Value != want {
				t.Errorf("JAVA_TOOL_OPTIONS %q, want %q", e[0].Value, want)
			}
			return
		}
	}
	t.Errorf("no env in the patch %+v", res.Patch)
}
