package webhook

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"
)

// walk applies the step decide finds due at now, failing t when it is not
// want.
func walk(t *testing.T, st *state, now time.Time, p policy, want change) *state {
	t.Helper()
	d := decide(st, now, p)
	if d.change != want {
		t.Fatalf("at %s: step %s (%s), want %s", now.Format(time.RFC3339), d.change, d.reason, want)
	}
	next, err := apply(st, d.change, now, p)
	if err != nil {
		t.Fatal(err)
	}
	return next
}

// idle checks that nothing is due at now and that decide wakes at wake.
func idle(t *testing.T, st *state, now time.Time, p policy, wake time.Time) {
	t.Helper()
	d := decide(st, now, p)
	if d.change != changeNone || !d.wake.Equal(wake) {
		t.Fatalf("at %s: step %s, wake %s; want nothing until %s", now.Format(time.RFC3339), d.change, d.wake.Format(time.RFC3339), wake.Format(time.RFC3339))
	}
}

func TestACARotationAddsTheCAThenServesItThenDropsTheOld(t *testing.T) {
	p := testPolicy(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := walk(t, nil, t0, p, changeFresh)
	oldCA := st.signer.cert
	// The serving certificate falls due first (day 60), then the CA (day 243).
	idle(t, st, t0.Add(time.Hour), p, st.serving.cert.NotAfter.Add(-p.servingRenewBefore))
	tCA := oldCA.NotAfter.Add(-p.caRenewBefore)
	st = walk(t, st, tCA.Add(-20*24*time.Hour), p, changeRenewServing)
	if issuerOf(st.serving.cert, st.bundle) != oldCA || len(st.bundle) != 1 {
		t.Fatal("a serving renewal changed the CA or the bundle")
	}
	st = walk(t, st, tCA, p, changeNewCA)
	newCA := st.signer.cert
	if len(st.bundle) != 2 || !st.bundle[0].Equal(oldCA) || !st.bundle[1].Equal(newCA) {
		t.Fatalf("bundle after the new CA: %d certificates, want old and new", len(st.bundle))
	}
	if issuerOf(st.serving.cert, st.bundle) != oldCA {
		t.Fatal("the serving certificate changed together with the bundle: callers may not trust it yet")
	}
	// The serving certificate waits until the bundle had time to spread.
	idle(t, st, tCA.Add(p.delay-time.Second), p, tCA.Add(p.delay))
	tServe := tCA.Add(p.delay)
	st = walk(t, st, tServe, p, changeServeNewCA)
	if !issuerOf(st.serving.cert, st.bundle).Equal(newCA) || len(st.bundle) != 2 {
		t.Fatal("after serve-new-ca the serving certificate should come from the new CA, with both CAs trusted")
	}
	// The old CA stays until every replica had time to serve the new certificate.
	idle(t, st, tServe.Add(p.delay-time.Second), p, tServe.Add(p.delay))
	st = walk(t, st, tServe.Add(p.delay), p, changeDropOldCAs)
	if len(st.bundle) != 1 || !st.bundle[0].Equal(newCA) {
		t.Fatal("after drop-old-ca the bundle should be the new CA alone")
	}
	idle(t, st, tServe.Add(p.delay), p, st.serving.cert.NotAfter.Add(-p.servingRenewBefore))
}

func TestTheServingCertificateIsRenewedWhenItsNamesChange(t *testing.T) {
	p := testPolicy(t)
	now := time.Now()
	st := walk(t, nil, now, p, changeFresh)
	p.ips = append(p.ips, net.IPv4(10, 0, 0, 7))
	st = walk(t, st, now, p, changeRenewServing)
	if !sameNames(st.serving.cert, p.names, p.ips) {
		t.Errorf("renewed certificate names %v %v, want %v %v", st.serving.cert.DNSNames, st.serving.cert.IPAddresses, p.names, p.ips)
	}
}

func TestMissingRotationTimesAreRecordedAsNow(t *testing.T) {
	p := testPolicy(t)
	now := time.Now()
	st := walk(t, nil, now, p, changeFresh)
	st, err := apply(st, changeNewCA, now.Add(time.Hour), p) // as RotateCA does
	if err != nil {
		t.Fatal(err)
	}
	st.signerSince = time.Time{} // lost, say by a hand edit
	later := now.Add(50 * 24 * time.Hour)
	st = walk(t, st, later, p, changeStamp)
	if !st.signerSince.Equal(later) {
		t.Fatalf("signerSince %s, want %s", st.signerSince, later)
	}
	// The serving certificate now waits the whole delay again.
	idle(t, st, later, p, later.Add(p.delay))
}

func TestExpiredCertificatesStartAfreshWithoutWaiting(t *testing.T) {
	p := testPolicy(t)
	t0 := time.Now()
	st := walk(t, nil, t0, p, changeFresh)
	// Down past the CA's expiry: nothing is trusted, so nothing to overlap.
	walk(t, st, st.signer.cert.NotAfter, p, changeFresh)
	// A serving certificate that expired while the new CA waited (for a
	// configuration that never came, say).
	st = walk(t, st, t0.Add(200*24*time.Hour), p, changeRenewServing)
	tCA := st.signer.cert.NotAfter.Add(-p.caRenewBefore)
	st = walk(t, st, tCA, p, changeNewCA)
	if !tCA.Before(st.serving.cert.NotAfter) {
		t.Fatal("the test's serving certificate expired before the rotation began")
	}
	walk(t, st, st.serving.cert.NotAfter, p, changeFresh)
}

func TestNoValidStateStartsAfresh(t *testing.T) {
	if d := decide(nil, time.Now(), testPolicy(t)); d.change != changeFresh {
		t.Fatalf("step %s, want %s", d.change, changeFresh)
	}
}

func TestCertOptionsThatCannotWorkAreRefused(t *testing.T) {
	base := CertOptions{Namespace: "ops", SecretName: "s", ServiceName: "svc", Registerer: prometheus.NewRegistry()}
	cases := map[string]struct {
		change func(*CertOptions)
		want   string
	}{
		"no namespace":                   {func(o *CertOptions) { o.Namespace = "" }, "Namespace"},
		"no service":                     {func(o *CertOptions) { o.ServiceName = "" }, "ServiceName"},
		"renew the CA before it is made": {func(o *CertOptions) { o.CARenewBefore = o.CAValidity }, "CARenewBefore"},
		"serving renewed before the CA": {func(o *CertOptions) {
			o.ServingRenewBefore = 200 * 24 * time.Hour
			o.ServingValidity = 300 * 24 * time.Hour
		}, "shorter than CARenewBefore"},
		"rotation longer than renewal": {func(o *CertOptions) { o.PropagationDelay = 20 * 24 * time.Hour }, "PropagationDelay"},
		"negative":                     {func(o *CertOptions) { o.ResyncInterval = -time.Second }, "negative"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			o := base
			o.CAValidity = DefaultCAValidity
			c.change(&o)
			_, err := NewCertManager(fake.NewClientset(), o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one naming %q", err, c.want)
			}
		})
	}
	o := base
	o.ServiceName, o.ExternalCerts = "", true
	if _, err := NewCertManager(fake.NewClientset(), o); err != nil {
		t.Errorf("ExternalCerts without a Service: %v", err)
	}
}
