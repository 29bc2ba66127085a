package jvm

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"io"
	"strings"
	"testing"
)

func TestConfigEnvRoundTripsAndRefusesBombs(t *testing.T) {
	enc, err := EncodeConfigEnv([]byte(valid16Config))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(enc, ConfigEnvGzipPrefix) || len(enc) >= len(valid16Config) {
		t.Fatalf("encoded form %q is not the compact prefixed form", enc)
	}
	got, err := DecodeConfigEnv(enc)
	if err != nil || string(got) != valid16Config {
		t.Fatalf("decode = %q, %v", got, err)
	}
	if got, err := DecodeConfigEnv("rules: []\n"); err != nil || string(got) != "rules: []\n" {
		t.Fatalf("plain value: %q, %v", got, err)
	}
	member := func(data []byte) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write(data)
		zw.Close()
		return b.Bytes()
	}
	gz := func(data []byte) string {
		return ConfigEnvGzipPrefix + base64.StdEncoding.EncodeToString(member(data))
	}
	exact := gz(bytes.Repeat([]byte("#"), MaxConfigSize))
	if got, err := DecodeConfigEnv(exact); err != nil || len(got) != MaxConfigSize {
		t.Fatalf("exactly the limit: %d bytes, %v", len(got), err)
	}
	// 64 MiB of zeros in about 64 KiB: 16 gzip members of 4 MiB each, which
	// a gzip reader reads one after the other. The limit trips inside the
	// first member, as it would in a single 64 MiB member, whose compression
	// alone took some 15 s of this test under -race.
	zeros := member(make([]byte, 4<<20))
	bomb := ConfigEnvGzipPrefix + base64.StdEncoding.EncodeToString(bytes.Repeat(zeros, 16))
	if len(bomb) > 128<<10 {
		t.Fatalf("the bomb is %d bytes encoded, want a small one", len(bomb))
	}
	// The bomb is what it says: 64 MiB once inflated, when nothing limits the reader.
	zr, err := gzip.NewReader(bytes.NewReader(bytes.Repeat(zeros, 16)))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(io.Discard, zr); err != nil || n != 64<<20 {
		t.Fatalf("the bomb inflates to %d bytes, %v; want 64 MiB", n, err)
	}
	for name, v := range map[string]string{
		"bomb":          bomb,
		"one over":      gz(bytes.Repeat([]byte("#"), MaxConfigSize+1)),
		"bad base64":    ConfigEnvGzipPrefix + "!!!",
		"not gzip":      ConfigEnvGzipPrefix + base64.StdEncoding.EncodeToString([]byte("rules: []")),
		"truncated":     exact[:len(exact)/2],
		"plain too big": strings.Repeat("#", MaxConfigSize+1),
	} {
		if _, err := DecodeConfigEnv(v); ReasonOf(err) != ReasonConfigInvalid {
			t.Errorf("%s: err = %v, want config-invalid", name, err)
		}
	}
}
