package jvm

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"
)

// Names of the entries of a bundle.
const (
	// BundleAgentJar is the bundle entry holding the agent jar.
	BundleAgentJar = "agent.jar"
	// BundleConfig is the bundle entry holding the exporter configuration (YAML).
	BundleConfig = "config.yaml"
)

// Size limits of a bundle's entries.
const (
	// MaxBundleAgentJar is the largest agent jar a bundle may carry: 64 MiB.
	MaxBundleAgentJar = 64 << 20
	// MaxBundleConfig is the largest exporter configuration a bundle may carry: 1 MiB.
	MaxBundleConfig = 1 << 20
)

// maxBundleTrailer bounds the zero padding read after a bundle's end-of-archive marker (tar pads to records of
// 10 KiB; 1 MiB leaves room for any blocking factor).
const maxBundleTrailer = 1 << 20

// Bundle is the agent jar and exporter configuration that `jmx-attach inject --bundle-stdin` reads from its
// standard input, so that it can run through the pods/exec API in a container that has neither file.
type Bundle struct {
	// AgentJar is the agent jar; nil in a configuration-only bundle (`jmx-attach reconfigure`).
	AgentJar []byte
	// Config is the exporter configuration.
	Config []byte
}

// WriteBundle writes a bundle to w: a tar stream (POSIX ustar, no compression) with the entry BundleAgentJar
// holding agentJar, unless agentJar is nil, and the entry BundleConfig holding config, as ReadBundle reads it.
// A nil agentJar makes the configuration-only bundle of `jmx-attach reconfigure --bundle-stdin`.
func WriteBundle(w io.Writer, agentJar, config []byte) error {
	if len(agentJar) > MaxBundleAgentJar {
		return fmt.Errorf("write bundle: agent jar is %d bytes, at most %d", len(agentJar), MaxBundleAgentJar)
	}
	if len(config) > MaxBundleConfig {
		return fmt.Errorf("write bundle: config is %d bytes, at most %d", len(config), MaxBundleConfig)
	}
	tw := tar.NewWriter(w)
	add := func(name string, data []byte) error {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o444, Size: int64(len(data)),
			ModTime: time.Unix(0, 0), Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write bundle: %s: %w", name, err)
		}
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("write bundle: %s: %w", name, err)
		}
		return nil
	}
	if agentJar != nil {
		if err := add(BundleAgentJar, agentJar); err != nil {
			return err
		}
	}
	if err := add(BundleConfig, config); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write bundle: %w", err)
	}
	return nil
}

// ReadBundle reads a whole bundle from r, to its end, before returning: a tar stream whose entries are exactly
// BundleAgentJar (when withJar; it must then be there) and BundleConfig, each a regular file within its limit
// (MaxBundleAgentJar, MaxBundleConfig), in any order, and after the end-of-archive marker nothing but zero
// padding. Any other entry, a duplicate, a missing entry, an entry over its limit or other trailing data is an
// error with ReasonBundleInvalid. Nothing in it is interpreted: Inject and Reconfigure check the jar and
// configuration as they check files.
func ReadBundle(r io.Reader, withJar bool) (Bundle, error) {
	fail := func(format string, args ...any) (Bundle, error) {
		return Bundle{}, &AttachError{Reason: ReasonBundleInvalid, Msg: "bundle: " + fmt.Sprintf(format, args...)}
	}
	tr := tar.NewReader(r)
	var b Bundle
	seen := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail("not a tar stream: %v", err)
		}
		limit := int64(0)
		switch {
		case hdr.Name == BundleAgentJar && withJar:
			limit = MaxBundleAgentJar
		case hdr.Name == BundleConfig:
			limit = MaxBundleConfig
		default:
			return fail("unexpected entry %q (a bundle holds %s)", hdr.Name, bundleEntries(withJar))
		}
		if hdr.Typeflag != tar.TypeReg {
			return fail("entry %q is not a regular file (type %q)", hdr.Name, hdr.Typeflag)
		}
		if seen[hdr.Name] {
			return fail("entry %q appears twice", hdr.Name)
		}
		seen[hdr.Name] = true
		if hdr.Size < 0 || hdr.Size > limit {
			return fail("entry %q is %d bytes, at most %d", hdr.Name, hdr.Size, limit)
		}
		data := make([]byte, hdr.Size)
		if _, err := io.ReadFull(tr, data); err != nil {
			return fail("entry %q: %v", hdr.Name, err)
		}
		if hdr.Name == BundleAgentJar {
			b.AgentJar = data
		} else {
			b.Config = data
		}
	}
	if withJar && !seen[BundleAgentJar] || !seen[BundleConfig] {
		return fail("entries %s are required", bundleEntries(withJar))
	}
	rest, err := io.ReadAll(io.LimitReader(r, maxBundleTrailer+1))
	if err != nil {
		return fail("read after the end of the archive: %v", err)
	}
	if len(rest) > maxBundleTrailer || len(bytes.Trim(rest, "\x00")) > 0 {
		return fail("data after the end of the archive")
	}
	return b, nil
}

func bundleEntries(withJar bool) string {
	if withJar {
		return BundleAgentJar + " and " + BundleConfig
	}
	return BundleConfig + " only"
}
