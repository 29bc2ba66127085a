// Package imageenv reads what a container image's own config sets for its JVM (JAVA_TOOL_OPTIONS and the other
// option variables, and the agents its entrypoint loads), so that the start-time webhook keeps an image's
// options instead of replacing them (issue 40; docs/atstart.md). atstart.Mutate does no I/O: the webhook asks a
// Reader first (Chooser does) and passes what it read in atstart.Input.ImageEnv.
//
// A Reader reads each image's config from its registry, anonymously, within a short timeout (the API server
// waits at most the webhook's timeoutSeconds for the whole answer), and keeps what it read, and what it could not
// read, for a while, by reference: a burst of pod creations of one workload reads its image once, and a
// registry that does not answer costs one timeout per image and TTL, not one per pod.
package imageenv

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"

	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
)

// Defaults of Options.
const (
	// DefaultTimeout bounds one read of an image's config: well inside the webhook's 5 s.
	DefaultTimeout = 2 * time.Second
	// DefaultTTL is how long a config read is kept. A reference by digest names one config for ever; one by
	// tag may move, and is read again after this.
	DefaultTTL = 10 * time.Minute
	// DefaultErrorTTL is how long a failed read is kept before the image is tried again.
	DefaultErrorTTL = time.Minute
	// DefaultMaxEntries bounds the cache (an entry is a few hundred bytes).
	DefaultMaxEntries = 1024
)

// Options configure a Reader. The zero value reads anonymously with the defaults.
type Options struct {
	// Timeout bounds one read of an image's config. Default: DefaultTimeout.
	Timeout time.Duration
	// TTL is how long a read config is kept. Default: DefaultTTL.
	TTL time.Duration
	// ErrorTTL is how long a failed read is kept. Default: DefaultErrorTTL.
	ErrorTTL time.Duration
	// MaxEntries bounds the cache: when it is full, the entry that expires first goes. Default: DefaultMaxEntries.
	MaxEntries int
	// Transport makes the registry requests. Default: remote.DefaultTransport.
	Transport http.RoundTripper
	// Platform picks the image of an index (a multi-platform image). Default: linux and the operator's
	// architecture. The platforms of one image rarely differ in their Env.
	Platform *v1.Platform
	// Now is the clock of the cache's expiry. Default: time.Now.
	Now func() time.Time
	// Logf, when set, is told of each failed read (once per image and ErrorTTL, not once per pod).
	Logf func(format string, args ...any)
}

// Reader reads images' configs and keeps what it read. Its methods are safe for concurrent use.
type Reader struct {
	opts    Options
	mu      sync.Mutex
	entries map[string]*entry
}

// entry is one image's read: done is closed when env is set.
type entry struct {
	done    chan struct{}
	env     atstart.ImageEnv
	expires time.Time
}

// New returns a Reader, or an error for options that cannot work.
func New(opts Options) (*Reader, error) {
	if opts.Timeout < 0 || opts.TTL < 0 || opts.ErrorTTL < 0 || opts.MaxEntries < 0 {
		return nil, errors.New("imageenv: negative option")
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.ErrorTTL == 0 {
		opts.ErrorTTL = DefaultErrorTTL
	}
	if opts.MaxEntries == 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.Transport == nil {
		opts.Transport = remote.DefaultTransport
	}
	if opts.Platform == nil {
		opts.Platform = &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Reader{opts: opts, entries: map[string]*entry{}}, nil
}

// Lookup returns what image's config sets for its JVM (its ImageEnv), from the cache when it was read or tried
// within its TTL; concurrent lookups of one image share one read. It returns within the Reader's Timeout, or
// when ctx ends (then Err says so and nothing is kept).
func (r *Reader) Lookup(ctx context.Context, image string) atstart.ImageEnv {
	ref, err := name.ParseReference(image)
	if err != nil {
		return atstart.ImageEnv{Err: fmt.Sprintf("image %q: %v", image, err)}
	}
	key := ref.Name()
	r.mu.Lock()
	e, ok := r.entries[key]
	if ok && isDone(e) && !r.opts.Now().Before(e.expires) {
		delete(r.entries, key)
		ok = false
	}
	if !ok {
		r.evict()
		e = &entry{done: make(chan struct{})}
		r.entries[key] = e
		// Detached from ctx: the read serves every lookup that waits for it, and ends at the timeout.
		go r.read(context.WithoutCancel(ctx), ref, e)
	}
	r.mu.Unlock()
	select {
	case <-e.done:
		return e.env
	case <-ctx.Done():
		return atstart.ImageEnv{Err: "image " + image + ": " + ctx.Err().Error()}
	}
}

// read reads ref's config into e, and closes e.done.
func (r *Reader) read(ctx context.Context, ref name.Reference, e *entry) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	env, err := r.config(ctx, ref)
	ttl := r.opts.TTL
	if err != nil {
		env = atstart.ImageEnv{Err: shortError(ref, err, r.opts.Timeout)}
		ttl = r.opts.ErrorTTL
		if r.opts.Logf != nil {
			r.opts.Logf("imageenv: cannot read the config of %s (tried again after %s): %v", ref, ttl, err)
		}
	}
	r.mu.Lock()
	e.env, e.expires = env, r.opts.Now().Add(ttl)
	close(e.done)
	r.mu.Unlock()
}

// config reads ref's config from its registry.
func (r *Reader) config(ctx context.Context, ref name.Reference) (atstart.ImageEnv, error) {
	img, err := remote.Image(ref, remote.WithContext(ctx),
		remote.WithTransport(r.opts.Transport), remote.WithPlatform(*r.opts.Platform))
	if err != nil {
		return atstart.ImageEnv{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return atstart.ImageEnv{}, err
	}
	return imageEnv(cf.Config), nil
}

// imageEnv keeps of an image's config what atstart.Mutate judges.
func imageEnv(c v1.Config) atstart.ImageEnv {
	ie := atstart.ImageEnv{Env: map[string]string{}}
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		for _, want := range atstart.ImageEnvVars {
			if k == want {
				ie.Env[k] = v // the last one wins, as in the runtime
			}
		}
	}
	for _, a := range append(append([]string(nil), c.Entrypoint...), c.Cmd...) {
		if strings.HasPrefix(a, "-javaagent:") {
			ie.Agents = append(ie.Agents, a)
		}
	}
	return ie
}

// shortError names the image and the error, short enough for a pod's annotation.
func shortError(ref name.Reference, err error, timeout time.Duration) string {
	msg := err.Error()
	if errors.Is(err, context.DeadlineExceeded) {
		msg = fmt.Sprintf("no answer within %s", timeout)
	}
	if len(msg) > 200 {
		msg = strings.ToValidUTF8(msg[:197], "") + "..."
	}
	return "image " + ref.String() + ": " + msg
}

func isDone(e *entry) bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// evict makes room for one entry: expired entries go, then, while the cache is full, the read one that
// expires first. Reads under way stay. r.mu is held.
func (r *Reader) evict() {
	if len(r.entries) < r.opts.MaxEntries {
		return
	}
	now := r.opts.Now()
	for k, e := range r.entries {
		if isDone(e) && !now.Before(e.expires) {
			delete(r.entries, k)
		}
	}
	for len(r.entries) >= r.opts.MaxEntries {
		first := ""
		for k, e := range r.entries {
			if isDone(e) && (first == "" || e.expires.Before(r.entries[first].expires)) {
				first = k
			}
		}
		if first == "" {
			return // every entry is a read under way, each ends within the timeout
		}
		delete(r.entries, first)
	}
}

// Len returns the number of images in the cache, reads under way included.
func (r *Reader) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.entries)
}

// Fill reads, concurrently and each image once, the images of the pod's containers that in selects, and sets
// in.ImageEnv for them. A container whose env sets JAVA_TOOL_OPTIONS is read too: its image's other option
// variables and entrypoint still apply to its JVM.
func (r *Reader) Fill(ctx context.Context, pod *corev1.Pod, in *atstart.Input) {
	images := map[string][]string{} // image -> containers
	for _, ct := range pod.Spec.Containers {
		if len(in.Containers) > 0 && !contains(in.Containers, ct.Name) || ct.Image == "" {
			continue
		}
		images[ct.Image] = append(images[ct.Image], ct.Name)
	}
	if len(images) == 0 {
		return
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := make(map[string]atstart.ImageEnv, len(pod.Spec.Containers))
	for image, containers := range images {
		wg.Go(func() {
			ie := r.Lookup(ctx, image)
			mu.Lock()
			defer mu.Unlock()
			for _, c := range containers {
				out[c] = ie
			}
		})
	}
	wg.Wait()
	in.ImageEnv = out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Chooser wraps choose so that, for a pod that choose wants injected, r reads its containers' images first
// (Fill) and unreadable sets Input.Unreadable.
func Chooser(r *Reader, unreadable atstart.UnreadableImage, choose atstart.Chooser) atstart.Chooser {
	return func(ctx context.Context, pod *corev1.Pod) (atstart.Input, bool, error) {
		in, ok, err := choose(ctx, pod)
		if err != nil || !ok {
			return in, ok, err
		}
		r.Fill(ctx, pod, &in)
		in.Unreadable = unreadable
		return in, true, nil
	}
}
