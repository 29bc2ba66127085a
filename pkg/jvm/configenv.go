package jvm

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
)

// ConfigEnvGzipPrefix begins an environment variable value (jmx-attach --config-env) that holds the exporter
// configuration gzipped and base64-encoded (standard encoding, with padding) rather than as plain YAML.
const ConfigEnvGzipPrefix = "gzip+base64:"

// EncodeConfigEnv returns config in the compact form DecodeConfigEnv reads: ConfigEnvGzipPrefix followed by the
// base64 of the gzipped bytes. A configuration over MaxConfigSize is refused (ReasonConfigInvalid).
func EncodeConfigEnv(config []byte) (string, error) {
	if len(config) > MaxConfigSize {
		return "", &AttachError{Reason: ReasonConfigInvalid, Msg: fmt.Sprintf("exporter config is %d bytes, at most %d", len(config), MaxConfigSize)}
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return "", err
	}
	if _, err := zw.Write(config); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return ConfigEnvGzipPrefix + base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// DecodeConfigEnv returns the exporter configuration an environment variable holds: the value itself (plain
// YAML), or, when it starts with ConfigEnvGzipPrefix, the gunzipped base64 after it. Decompression stops after
// MaxConfigSize bytes, so a small value that would expand without bound (a gzip bomb) costs nothing; anything
// that does not decode, or decodes to more than MaxConfigSize bytes, is an *AttachError with
// ReasonConfigInvalid.
func DecodeConfigEnv(value string) ([]byte, error) {
	enc, ok := strings.CutPrefix(value, ConfigEnvGzipPrefix)
	if !ok {
		if len(value) > MaxConfigSize {
			return nil, &AttachError{Reason: ReasonConfigInvalid, Msg: fmt.Sprintf("exporter config is %d bytes, at most %d", len(value), MaxConfigSize)}
		}
		return []byte(value), nil
	}
	bad := func(err error) ([]byte, error) {
		return nil, &AttachError{Reason: ReasonConfigInvalid, Msg: "exporter config: " + ConfigEnvGzipPrefix + " value", Err: err}
	}
	zr, err := gzip.NewReader(base64.NewDecoder(base64.StdEncoding, strings.NewReader(strings.TrimSpace(enc))))
	if err != nil {
		return bad(err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, MaxConfigSize+1))
	if err != nil {
		return bad(err)
	}
	if len(data) > MaxConfigSize {
		return bad(fmt.Errorf("decompresses to more than %d bytes", MaxConfigSize))
	}
	// Reading to the end checks the gzip trailer (CRC and size) and the base64 padding.
	if n, err := io.Copy(io.Discard, io.LimitReader(zr, 1)); err != nil || n != 0 {
		if err == nil {
			err = fmt.Errorf("decompresses to more than %d bytes", MaxConfigSize)
		}
		return bad(err)
	}
	return data, nil
}
