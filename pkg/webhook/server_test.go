package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func quietLogger() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

func reviewBody(t *testing.T, uid types.UID) []byte {
	t.Helper()
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &admissionv1.AdmissionRequest{UID: uid, Operation: admissionv1.Create, Namespace: "ns", Name: "p"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestServerAnswersAndFailsOpen(t *testing.T) {
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) }) // lets the overrunning handler's goroutine end
	patch := []byte(`[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]`)
	handlers := map[string]Handler{
		"/nil": HandlerFunc(func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse { return nil }),
		"/patch": HandlerFunc(func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch}
		}),
		"/deny": HandlerFunc(func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: "no"}}
		}),
		"/panic": HandlerFunc(func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse { panic("boom") }),
		"/stuck": HandlerFunc(func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			<-stuck // heeds no context
			return nil
		}),
	}
	reg := prometheus.NewRegistry()
	s, err := NewServer(ServerOptions{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, errNoCertificate },
		Handlers:       handlers, MaxBodyBytes: 4096, HandlerTimeout: time.Hour,
		Registerer: reg, Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	cases := []struct {
		name, method, path, contentType string
		body                            []byte
		code                            int
		allowed                         bool
		patched                         bool
		warning                         string
	}{
		{"nil response allows", http.MethodPost, "/nil", "application/json", reviewBody(t, "u1"), 200, true, false, ""},
		{"patch gets its type", http.MethodPost, "/patch", "application/json; charset=utf-8", reviewBody(t, "u2"), 200, true, true, ""},
		{"denial passes through", http.MethodPost, "/deny", "application/json", reviewBody(t, "u3"), 200, false, false, ""},
		{"panic allows with a warning", http.MethodPost, "/panic", "application/json", reviewBody(t, "u4"), 200, true, false, "handler failed"},
		// The apiserver's ?timeout= bounds the wait even with an hour's HandlerTimeout.
		{"overrun allows with a warning", http.MethodPost, "/stuck?timeout=250ms", "application/json", reviewBody(t, "u5"), 200, true, false, "in time"},
		{"GET", http.MethodGet, "/nil", "", nil, 405, false, false, ""},
		{"not JSON", http.MethodPost, "/nil", "text/plain", reviewBody(t, "u6"), 415, false, false, ""},
		{"too large", http.MethodPost, "/nil", "application/json", append(reviewBody(t, "u7"), bytes.Repeat([]byte(" "), 5000)...), 413, false, false, ""},
		{"garbage", http.MethodPost, "/nil", "application/json", []byte("{"), 400, false, false, ""},
		{"v1beta1", http.MethodPost, "/nil", "application/json", bytes.Replace(reviewBody(t, "u8"), []byte("admission.k8s.io/v1"), []byte("admission.k8s.io/v1beta1"), 1), 400, false, false, ""},
		{"no request", http.MethodPost, "/nil", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), 400, false, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(c.method, c.path, bytes.NewReader(c.body))
			if c.contentType != "" {
				req.Header.Set("Content-Type", c.contentType)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != c.code {
				t.Fatalf("status %d (%s), want %d", rec.Code, rec.Body, c.code)
			}
			if c.code != 200 {
				return
			}
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
			var in admissionv1.AdmissionReview
			_ = json.Unmarshal(c.body, &in)
			r := out.Response
			if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || r == nil || r.UID != in.Request.UID {
				t.Fatalf("response %s does not answer request %s", rec.Body, in.Request.UID)
			}
			if r.Allowed != c.allowed || (len(r.Patch) > 0) != c.patched {
				t.Errorf("allowed %v, patch %q; want allowed %v, patched %v", r.Allowed, r.Patch, c.allowed, c.patched)
			}
			if c.patched && (r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch) {
				t.Errorf("patch type %v, want JSONPatch", r.PatchType)
			}
			if got := strings.Join(r.Warnings, "\n"); !strings.Contains(got, c.warning) || (c.warning == "" && got != "") {
				t.Errorf("warnings %q, want %q", got, c.warning)
			}
		})
	}
	for _, c := range []struct {
		path, result string
		want         float64
	}{
		{"/nil", resultAllowed, 1}, {"/patch", resultPatched, 1}, {"/deny", resultDenied, 1},
		{"/panic", resultPanic, 1}, {"/stuck", resultTimeout, 1}, {"/nil", resultInvalid, 6},
	} {
		if got := counterValue(t, s.metrics.requests.WithLabelValues(c.path, c.result)); got != c.want {
			t.Errorf("handlerkit_webhook_requests_total{path=%q,result=%q} = %v, want %v", c.path, c.result, got, c.want)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "handlerkit_webhook_request_duration_seconds" && len(f.GetMetric()) != 5 {
			t.Errorf("latency series for %d paths, want 5", len(f.GetMetric()))
		}
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// testCA returns a CA and a serving certificate for 127.0.0.1 it signed.
func testCA(t *testing.T) (*x509.CertPool, *tls.Certificate) {
	t.Helper()
	now := time.Now()
	ca, err := newCA(now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newServing(ca, now, time.Hour, nil, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(s.certPEM, s.keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool, &pair
}

func TestServerServesTheCurrentCertificateAndStopsGracefully(t *testing.T) {
	pool1, cert1 := testCA(t)
	pool2, cert2 := testCA(t)
	var current atomic.Pointer[tls.Certificate]
	current.Store(cert1)
	entered, release := make(chan struct{}), make(chan struct{})
	s, err := NewServer(ServerOptions{
		Addr:           "127.0.0.1:0",
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return current.Load(), nil },
		Handlers: map[string]Handler{
			"/ok": HandlerFunc(func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse { return nil }),
			"/slow": HandlerFunc(func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
				close(entered)
				<-release
				return nil
			}),
		},
		Registerer: prometheus.NewRegistry(), Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	post := func(pool *x509.CertPool, path string) (*http.Response, error) {
		c := &http.Client{Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, NextProtos: []string{"h2", "http/1.1"}},
			DisableKeepAlives: true, ForceAttemptHTTP2: true,
		}}
		resp, err := c.Post("https://"+s.Addr()+path, "application/json", bytes.NewReader(reviewBody(t, "u")))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	resp, err := post(pool1, "/ok")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.ProtoMajor != 1 {
		t.Fatalf("%s over %s, want 200 over HTTP/1.1", resp.Status, resp.Proto)
	}
	// A new certificate is served from the next handshake on, without a restart.
	current.Store(cert2)
	if _, err := post(pool1, "/ok"); err == nil {
		t.Fatal("a client trusting only the first CA still connects after the switch")
	}
	if _, err := post(pool2, "/ok"); err != nil {
		t.Fatalf("a client trusting the second CA: %v", err)
	}
	// A request in flight when the context ends is answered.
	slow := make(chan error, 1)
	go func() {
		resp, err := post(pool2, "/slow")
		if err == nil && resp.StatusCode != 200 {
			err = errors.New(resp.Status)
		}
		slow <- err
	}()
	<-entered
	cancel()
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) with a request in flight", err)
	case err := <-slow:
		t.Fatalf("the request in flight ended (%v) before its handler returned", err)
	default:
	}
	close(release)
	if err := <-slow; err != nil {
		t.Errorf("request in flight: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := post(pool2, "/ok"); err == nil {
		t.Error("the stopped server still answers")
	}
}

// A client that opened a connection and sent nothing (the apiserver's
// transport dials ahead) holds no request: stopping is not an error.
func TestServerStopsDespiteConnectionsThatSentNoRequest(t *testing.T) {
	pool, cert := testCA(t)
	s, err := NewServer(ServerOptions{
		Addr:           "127.0.0.1:0",
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil },
		Handlers: map[string]Handler{"/ok": HandlerFunc(func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			return nil
		})},
		ShutdownTimeout: 200 * time.Millisecond,
		Registerer:      prometheus.NewRegistry(), Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	conn, err := tls.Dial("tcp", s.Addr(), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve with a connection that sent no request: %v", err)
	}
}
