package jvm

import (
	"archive/zip"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// maxManifestSize bounds the manifest read from an agent jar.
const maxManifestSize = 1 << 20

// maxConfigSize bounds the exporter configuration: MaxConfigSize.
const maxConfigSize = MaxConfigSize

// MaxConfigSize is the largest exporter configuration accepted, in bytes, from a file, an environment variable
// (after decompression) or a bundle: 1 MiB. Real configurations are a few KiB.
const MaxConfigSize = 1 << 20

// maxAgentJarSize bounds the agent jar read into memory (jmx_exporter's is a few MiB).
const maxAgentJarSize = 256 << 20

// CheckAgentJar checks that file is a readable jar whose manifest names an Agent-Class, and returns that class.
// A jar without one makes the JVM fail the load (return code 100) after it was already signalled.
func CheckAgentJar(file string) (string, error) {
	data, err := readBounded(file, maxAgentJarSize)
	if err != nil {
		return "", &AttachError{Reason: ReasonAgentJarInvalid, Msg: fmt.Sprintf("agent jar %s", file), Err: err}
	}
	return checkAgentJarData(file, data)
}

// checkAgentJarData is CheckAgentJar for the jar's bytes; file names it in errors.
func checkAgentJarData(file string, data []byte) (string, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return "", &AttachError{Reason: ReasonAgentJarInvalid, Msg: fmt.Sprintf("agent jar %s", file), Err: err}
	}
	for _, f := range zr.File {
		if !strings.EqualFold(f.Name, "META-INF/MANIFEST.MF") {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return "", &AttachError{Reason: ReasonAgentJarInvalid, Msg: fmt.Sprintf("agent jar %s: manifest", file), Err: err}
		}
		manifest, err := io.ReadAll(io.LimitReader(rc, maxManifestSize))
		rc.Close()
		if err != nil {
			return "", &AttachError{Reason: ReasonAgentJarInvalid, Msg: fmt.Sprintf("agent jar %s: manifest", file), Err: err}
		}
		class := ParseManifest(manifest)["Agent-Class"]
		if class == "" {
			return "", &AttachError{Reason: ReasonAgentJarInvalid,
				Msg: fmt.Sprintf("agent jar %s: manifest has no Agent-Class attribute", file)}
		}
		return class, nil
	}
	return "", &AttachError{Reason: ReasonAgentJarInvalid, Msg: fmt.Sprintf("agent jar %s has no META-INF/MANIFEST.MF", file)}
}

// agentFiles are the agent jar and exporter configuration, read once and checked; these very bytes are copied
// into the target and verified there.
type agentFiles struct {
	jar, config namedData
}

// readAgentFiles reads and checks the agent jar and configuration of a (its JarData and ConfigData when set).
func readAgentFiles(a Agent, extraKeys []string) (agentFiles, error) {
	jarName, configName := copyName(a.Jar, BundleAgentJar), copyName(a.Config, BundleConfig)
	jar, err := a.JarData, error(nil)
	if jar == nil {
		jar, err = readBounded(a.Jar, maxAgentJarSize)
	}
	if err != nil {
		return agentFiles{}, &AttachError{Reason: ReasonAgentJarInvalid, Msg: fmt.Sprintf("agent jar %s", a.Jar), Err: err}
	}
	if _, err := checkAgentJarData(orName(a.Jar, jarName), jar); err != nil {
		return agentFiles{}, err
	}
	config := a.ConfigData
	if config == nil {
		config, err = readBounded(a.Config, maxConfigSize)
	}
	if err != nil {
		return agentFiles{}, &AttachError{Reason: ReasonConfigInvalid, Msg: "exporter config", Err: err}
	}
	if err := ValidateExporterConfig(config, extraKeys...); err != nil {
		return agentFiles{}, &AttachError{Reason: ReasonConfigInvalid, Msg: fmt.Sprintf("exporter config %s", orName(a.Config, configName)), Err: err}
	}
	return agentFiles{jar: namedData{name: jarName, data: jar}, config: namedData{name: configName, data: config}}, nil
}

// copyName is the name a copy of file gets: its last element, or def when file is empty.
func copyName(file, def string) string {
	if file == "" {
		return def
	}
	if b := path.Base(file); b != "/" && b != "." && b != ".." {
		return b
	}
	return def
}

func orName(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// readBounded reads file, refusing one larger than limit bytes.
func readBounded(file string, limit int64) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", file, limit)
	}
	return data, nil
}

// ParseManifest returns the main section of a jar manifest. Continuation lines (starting with one space) are
// joined to the line before, as the jar specification defines.
func ParseManifest(data []byte) map[string]string {
	attrs := map[string]string{}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxManifestSize)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if line == "" {
			break // end of the main section
		}
		if strings.HasPrefix(line, " ") && len(lines) > 0 {
			lines[len(lines)-1] += line[1:]
			continue
		}
		lines = append(lines, line)
	}
	for _, l := range lines {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		attrs[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return attrs
}

// ExporterConfigKeys are the top-level keys of a Prometheus jmx_exporter configuration that CheckExporterConfig
// accepts: every key jmx_exporter's collector 1.6.0 reads (io.prometheus.jmx.JmxCollector and
// ObjectNameAttributeFilter), and the sections its 1.x java agent reads itself (httpServer, openTelemetry,
// startDelaySeconds, excludeJvmMetrics).
var ExporterConfigKeys = []string{
	"startDelaySeconds", "hostPort", "jmxUrl", "username", "password", "ssl",
	"lowercaseOutputName", "lowercaseOutputLabelNames", "inferCounterTypeFromName", "excludeJvmMetrics",
	"includeObjectNames", "excludeObjectNames", "whitelistObjectNames", "blacklistObjectNames",
	"autoExcludeObjectNameAttributes", "includeObjectNameAttributes", "excludeObjectNameAttributes",
	"metricCustomizers", "rules", "httpServer", "openTelemetry",
}

// CheckExporterConfig checks that file holds a jmx_exporter configuration: YAML whose top level is a mapping
// (or empty) with only known keys (ExporterConfigKeys plus extraKeys) and the right kinds of values for the keys
// the collector casts at start. It is a fast prefilter that runs before any JVM is touched, so that most
// mistakes are reported without one: it never refuses what jmx_exporter's collector 1.6.0 accepts, except a
// key the collector does not know, which it would silently ignore (a misspelt "rule" changes what is exported).
// The agent parses the whole configuration with the collector's own code and is the authority on the rest
// (regular expressions, ObjectName patterns, the httpServer section).
func CheckExporterConfig(file string, extraKeys ...string) error {
	data, err := readBounded(file, maxConfigSize)
	if err != nil {
		return &AttachError{Reason: ReasonConfigInvalid, Msg: "exporter config", Err: err}
	}
	if err := ValidateExporterConfig(data, extraKeys...); err != nil {
		return &AttachError{Reason: ReasonConfigInvalid, Msg: fmt.Sprintf("exporter config %s", file), Err: err}
	}
	return nil
}

// ValidateExporterConfig is CheckExporterConfig for configuration bytes. A key given twice counts once, with its
// last value, as the collector's YAML parser (SnakeYAML, duplicate keys allowed) reads it; a merge key (<<) at
// the top level is left to the agent.
func ValidateExporterConfig(data []byte, extraKeys ...string) error {
	if len(data) > maxConfigSize {
		return fmt.Errorf("the config is %d bytes, at most %d", len(data), maxConfigSize)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("not valid YAML: %w", err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil // an empty file: the exporter uses its defaults
	}
	top := doc.Content[0]
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return nil
	}
	if top.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: the top level must be a mapping of settings", top.Line)
	}
	known := map[string]bool{}
	for _, k := range ExporterConfigKeys {
		known[k] = true
	}
	for _, k := range extraKeys {
		known[k] = true
	}
	last := map[string]*yaml.Node{}
	var order []string
	for i := 0; i+1 < len(top.Content); i += 2 {
		key, val := top.Content[i], top.Content[i+1]
		if key.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: keys must be plain strings", key.Line)
		}
		name := key.Value
		if key.Tag == "!!merge" {
			continue // "<<: *anchor": SnakeYAML merges the keys in; the agent judges them
		}
		if !known[name] {
			return fmt.Errorf("line %d: unknown top-level key %q (known: %s)", key.Line, name, strings.Join(sortedKeys(known), ", "))
		}
		if last[name] == nil {
			order = append(order, name)
		}
		last[name] = val
	}
	for _, name := range order {
		val := last[name]
		if err := checkValueKind(name, val); err != nil {
			return fmt.Errorf("line %d: %s: %w", val.Line, name, err)
		}
	}
	if last["hostPort"] != nil && last["jmxUrl"] != nil {
		return errors.New("at most one of hostPort and jmxUrl may be set")
	}
	return nil
}

// isNull reports a YAML null value (an empty value, ~ or null).
func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// isBool reports a value SnakeYAML, the collector's parser, reads as a Boolean: YAML 1.1's true, false, yes, no,
// on and off, lower case, capitalised or upper case. go-yaml reads yes/no/on/off as strings.
func isBool(n *yaml.Node) bool {
	if n.Kind != yaml.ScalarNode || n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return false
	}
	if n.Tag == "!!bool" {
		return true
	}
	if n.Tag != "!!str" {
		return false
	}
	for _, w := range []string{"yes", "no", "on", "off", "true", "false"} {
		if n.Value == w || n.Value == strings.ToUpper(w) || n.Value == strings.ToUpper(w[:1])+w[1:] {
			return true
		}
	}
	return false
}

// sexagesimal is SnakeYAML's YAML 1.1 base-60 integer (1:30 is 90), which go-yaml reads as a string.
var sexagesimal = regexp.MustCompile(`^\+?[1-9][0-9_]*(?::[0-5]?[0-9])+$`)

// nonNegativeInt32 reports a value SnakeYAML reads as an Integer (not a Long) that is not negative.
func nonNegativeInt32(n *yaml.Node) bool {
	if n.Kind != yaml.ScalarNode || n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return false
	}
	if n.Tag == "!!str" && sexagesimal.MatchString(n.Value) {
		return true
	}
	if n.Tag != "!!int" {
		return false
	}
	v := strings.TrimPrefix(strings.ReplaceAll(n.Value, "_", ""), "+")
	if strings.HasPrefix(v, "0o") {
		v = "0" + v[2:]
	}
	i, err := strconv.ParseInt(v, 0, 64)
	return err == nil && i >= 0 && i <= 1<<31-1
}

// checkValueKind checks the kind of a top-level value where the collector casts it at start and would refuse
// another kind; values it converts (String.valueOf) or that the agent checks itself are left to the agent.
func checkValueKind(name string, val *yaml.Node) error {
	switch name {
	case "lowercaseOutputName", "lowercaseOutputLabelNames", "inferCounterTypeFromName", "excludeJvmMetrics":
		if !isNull(val) && !isBool(val) {
			return errors.New("must be true or false")
		}
	case "ssl":
		if !isNull(val) && !isBool(val) && val.Kind != yaml.MappingNode {
			return errors.New("must be true, false or a mapping of SSL settings")
		}
	case "startDelaySeconds":
		if !nonNegativeInt32(val) {
			return errors.New("must be a whole number of seconds")
		}
	case "includeObjectNames", "excludeObjectNames", "whitelistObjectNames", "blacklistObjectNames":
		if val.Kind != yaml.SequenceNode {
			return errors.New("must be a list of ObjectName patterns")
		}
		for _, item := range val.Content {
			if item.Kind != yaml.ScalarNode {
				return errors.New("must be a list of ObjectName patterns")
			}
		}
	case "rules", "metricCustomizers":
		if val.Kind != yaml.SequenceNode {
			return fmt.Errorf("must be a list of %s", map[string]string{"rules": "rules", "metricCustomizers": "customizers"}[name])
		}
		for _, item := range val.Content {
			if item.Kind != yaml.MappingNode {
				return fmt.Errorf("line %d: each item must be a mapping", item.Line)
			}
		}
	case "hostPort", "jmxUrl", "username", "password":
		if val.Kind != yaml.ScalarNode {
			return errors.New("must be a string")
		}
	case "httpServer", "openTelemetry":
		if !isNull(val) && val.Kind != yaml.MappingNode {
			return errors.New("must be a mapping")
		}
	}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// PortListening reports whether some socket listens on TCP port in the network namespace of process pid, read
// from /proc/<pid>/net/tcp and tcp6. Any listener counts, whatever its address. It is a cheap first look: a port
// without a listener can still be unusable for the agent (see CheckPort).
func PortListening(pid, port int) (bool, error) {
	socks, err := portSockets(pid, port)
	if err != nil {
		return false, err
	}
	for _, s := range socks {
		if s.State == TCPListen {
			return true, nil
		}
	}
	return false, nil
}

// readNetTCP reads and parses /proc/<pid>/net/<name> (tcp or tcp6); a missing tcp6 (IPv6 disabled in that
// namespace) is an empty list.
func readNetTCP(pid int, name string) ([]Socket, error) {
	data, err := os.ReadFile(path.Join(procRoot, strconv.Itoa(pid), "net", name))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && name == "tcp6" {
			return nil, nil
		}
		return nil, procErr(pid, err)
	}
	socks, err := ParseNetTCP(data)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return socks, nil
}
