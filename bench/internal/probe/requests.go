package probe

import (
	"net/http"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
)

// Request classes, by what the request does to the API server.
const (
	ClassGet       = "get"       // a live read of one object
	ClassList      = "list"      // a read of a collection
	ClassWatch     = "watch"     // a watch stream opened
	ClassWrite     = "write"     // create, update, patch or delete
	ClassDiscovery = "discovery" // /api, /apis and /version
)

// Requests counts the requests sent through the rest.Configs it is
// installed on, by class. It is safe for concurrent use.
type Requests struct {
	mu     sync.Mutex
	counts map[string]int64
}

// NewRequests returns an empty counter.
func NewRequests() *Requests { return &Requests{counts: map[string]int64{}} }

// Install makes every client built from cfg count its requests here. Call it
// before building clients; it keeps any transport wrapper cfg already has.
func (r *Requests) Install(cfg *rest.Config) {
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			r.add(Classify(req.Method, req.URL.Path, req.URL.Query().Get("watch")))
			return next.RoundTrip(req)
		})
	})
}

// Snapshot returns the counts so far.
func (r *Requests) Snapshot() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int64, len(r.counts))
	for k, v := range r.counts {
		out[k] = v
	}
	return out
}

func (r *Requests) add(class string) {
	r.mu.Lock()
	r.counts[class]++
	r.mu.Unlock()
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Classify names the class of a request to path with the given method and
// watch query parameter.
func Classify(method, path, watch string) string {
	if method != http.MethodGet {
		return ClassWrite
	}
	rest, ok := resourcePath(path)
	switch {
	case !ok:
		return ClassDiscovery
	case watch == "true" || watch == "1" || (len(rest) > 0 && rest[0] == "watch"):
		return ClassWatch
	case len(rest) <= 1:
		return ClassList
	default:
		return ClassGet
	}
}

// resourcePath returns the segments after the group version and the
// namespace: ["pods"] for a collection, ["pods", "web-0"] for an object.
// ok is false for discovery paths.
func resourcePath(path string) ([]string, bool) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(segs) >= 3 && segs[0] == "api":
		segs = segs[2:]
	case len(segs) >= 4 && segs[0] == "apis":
		segs = segs[3:]
	default:
		return nil, false
	}
	if len(segs) >= 3 && segs[0] == "namespaces" {
		segs = segs[2:]
	}
	return segs, true
}
