package inject

import (
	"fmt"

	"github.com/handlerkit/handlerkit/pkg/jvm"
)

// Config size limits. An ephemeral container cannot mount a volume, so the
// config travels in its environment, and ephemeral containers stay in the pod
// spec for the pod's life: each one costs the pod's object its config's size
// in etcd (whose default request limit is 1.5 MiB). The config therefore
// travels gzipped, and is refused above these sizes before any patch, with
// either strategy (one rule for every exporter).
const (
	// MaxConfigBytes is the largest config accepted, uncompressed.
	MaxConfigBytes = 256 << 10
	// MaxCompressedConfigBytes is the largest environment value a config may
	// take once compressed and encoded (ConfigEncodingPrefix included).
	MaxCompressedConfigBytes = 32 << 10
)

// ConfigEncodingPrefix starts a ConfigEnv value that holds the config
// gzipped and base64-encoded, which is how the EphemeralContainer strategy
// passes it; jmx-attach --config-env decodes it (jvm.DecodeConfigEnv).
const ConfigEncodingPrefix = jvm.ConfigEnvGzipPrefix

// EncodeConfig returns the ConfigEnv value for config (jvm.EncodeConfigEnv:
// ConfigEncodingPrefix and the base64 of its gzip compression). It refuses a
// config above MaxConfigBytes, or whose value would exceed
// MaxCompressedConfigBytes, with an error that says which.
func EncodeConfig(config []byte) (string, error) {
	if len(config) > MaxConfigBytes {
		return "", fmt.Errorf("the config is %d bytes, more than the %d (%d KiB) the operator accepts", len(config), MaxConfigBytes, MaxConfigBytes>>10)
	}
	v, err := jvm.EncodeConfigEnv(config)
	if err != nil {
		return "", err
	}
	if len(v) > MaxCompressedConfigBytes {
		return "", fmt.Errorf("the config is %d bytes compressed and encoded, more than the %d (%d KiB) the operator accepts", len(v), MaxCompressedConfigBytes, MaxCompressedConfigBytes>>10)
	}
	return v, nil
}
