package inject

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestEncodeConfigRoundTripsAndRefusesLargeConfigs(t *testing.T) {
	config := []byte(strings.Repeat("rules:\n- pattern: \"java.lang<type=Memory><HeapMemoryUsage>used\"\n", 1000))
	v, err := EncodeConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v, ConfigEncodingPrefix) || len(v) >= len(config) {
		t.Fatalf("value of %d bytes for %d bytes of config, prefix %q", len(v), len(config), v[:min(len(v), 20)])
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(v, ConfigEncodingPrefix))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	back, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(back, config) {
		t.Fatalf("decoded %d bytes (%v), want the config back", len(back), err)
	}
	// Over the raw limit, however well it compresses.
	if _, err := EncodeConfig(make([]byte, MaxConfigBytes+1)); err == nil || !strings.Contains(err.Error(), "256 KiB") {
		t.Errorf("a config over %d bytes: %v", MaxConfigBytes, err)
	}
	// Under the raw limit, but incompressible: over the compressed limit.
	random := make([]byte, 40<<10)
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	if _, err := EncodeConfig(random); err == nil || !strings.Contains(err.Error(), "32 KiB") {
		t.Errorf("40 KiB of random bytes: %v", err)
	}
	// Exactly at the raw limit and compressible: accepted.
	if _, err := EncodeConfig(bytes.Repeat([]byte("#"), MaxConfigBytes)); err != nil {
		t.Errorf("a config of exactly %d bytes: %v", MaxConfigBytes, err)
	}
}

func TestRefusedPatchTellsRefusalsFromRaces(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	cases := []struct {
		err  error
		want bool
	}{
		{apierrors.NewForbidden(gr, "p", errors.New(`pods "p" is forbidden: violates PodSecurity "restricted:latest"`)), true},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", field.ErrorList{field.Forbidden(field.NewPath("spec"), "no")}), true},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", field.ErrorList{field.Duplicate(field.NewPath("spec", "ephemeralContainers").Index(0).Child("name"), "jmx-1")}), false},
		{errors.New(`admission webhook "deny.example" denied the request: no debugging`), true},
		{apierrors.NewConflict(gr, "p", errors.New("changed")), false},
		{apierrors.NewServerTimeout(gr, "patch", 1), false},
		{errors.New("connection reset"), false},
	}
	for _, c := range cases {
		if got := refusedPatch(c.err); got != c.want {
			t.Errorf("refusedPatch(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestOperatorContainersCountsOnlyTheOperators(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{EphemeralContainers: []corev1.EphemeralContainer{
		{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "jmx-0123456789-1"}},
		{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "jmx-cfg-01234567-89abcdef-1"}},
		{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger-x1"}},
	}}}
	if n := OperatorContainers(pod); n != 2 {
		t.Errorf("%d, want 2 (kubectl debug's container is not the operator's)", n)
	}
}
