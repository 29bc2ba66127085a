package jvm

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
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
	gz := func(data []byte) string {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write(data)
		zw.Close()
		return ConfigEnvGzipPrefix + base64.StdEncoding.EncodeToString(b.Bytes())
	}
	exact := gz(bytes.Repeat([]byte("#"), MaxConfigSize))
	if got, err := DecodeConfigEnv(exact); err != nil || len(got) != MaxConfigSize {
		t.Fatalf("exactly the limit: %d bytes, %v", len(got), err)
	}
	bomb := gz(bytes.Repeat([]byte{0}, 64<<20)) // 64 MiB of zeros in about 64 KiB
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
