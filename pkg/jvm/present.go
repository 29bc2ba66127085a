package jvm

import (
	"archive/zip"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// handlerkitAgentClass is the Agent-Class and Premain-Class of the project's own agent, which serves the
// same metrics as jmx_exporter and so counts as one when it was started with -javaagent.
const handlerkitAgentClass = "dev.handlerkit.jmxagent.Agent"

// exporterPackage is the package of jmx_exporter's agent classes (io.prometheus.jmx.JavaAgent, and older or
// renamed builds of it).
const exporterPackage = "io.prometheus.jmx."

// javaAgents returns the jar of every -javaagent option in opts (as the JVM reads it: "-javaagent:<jar>[=<options>]").
func javaAgents(opts []string) []string {
	var jars []string
	for _, o := range opts {
		if v, ok := strings.CutPrefix(o, "-javaagent:"); ok {
			jar, _, _ := strings.Cut(v, "=")
			if jar != "" {
				jars = append(jars, jar)
			}
		}
	}
	return jars
}

// checkNoExporterAgent refuses a JVM that was started with a jmx_exporter agent (or this project's agent) as
// -javaagent, in its command line, JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS or _JAVA_OPTIONS: a second exporter
// would fail to register its collector, and jmx_exporter's own agent ends the JVM when that happens. A jar counts
// when its file name starts with jmx_prometheus, or when its manifest, read through the JVM's root, names a
// Premain-Class, Agent-Class or Launcher-Agent-Class of jmx_exporter's package or this project's agent class.
func checkNoExporterAgent(j JVM) error {
	for _, jar := range j.JavaAgents {
		why := exporterAgentJar(j.PID, jar)
		if why == "" {
			continue
		}
		return &AttachError{Reason: ReasonAgentAlreadyPresent, Msg: fmt.Sprintf(
			"pid %d was started with -javaagent:%s (%s); a second exporter would clash with it, so nothing is loaded", j.PID, jar, why)}
	}
	return nil
}

// exporterAgentJar says why the -javaagent jar of process pid is an exporter, or "" when it is not one or
// cannot be read (a JVM whose agent jar is gone still runs; the agent checks again itself).
func exporterAgentJar(pid int, jar string) string {
	if strings.HasPrefix(strings.ToLower(path.Base(jar)), "jmx_prometheus") {
		return "a jmx_exporter jar by its name"
	}
	root, err := openTargetRoot(pid)
	if err != nil {
		return ""
	}
	defer root.Close()
	name := jar
	if !path.IsAbs(name) {
		cwd, ok := targetCwd(pid, root)
		if !ok {
			return ""
		}
		name = path.Join(cwd, name)
	}
	fd, err := root.open(name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > maxAgentJarSize {
		return ""
	}
	zr, err := zip.NewReader(f, st.Size)
	if err != nil {
		return ""
	}
	for _, zf := range zr.File {
		if !strings.EqualFold(zf.Name, "META-INF/MANIFEST.MF") {
			continue
		}
		rc, err := zf.Open()
		if err != nil {
			return ""
		}
		data, err := io.ReadAll(io.LimitReader(rc, maxManifestSize))
		rc.Close()
		if err != nil {
			return ""
		}
		m := ParseManifest(data)
		for _, attr := range []string{"Premain-Class", "Agent-Class", "Launcher-Agent-Class"} {
			if c := m[attr]; strings.HasPrefix(c, exporterPackage) || c == handlerkitAgentClass {
				return fmt.Sprintf("its manifest's %s is %s", attr, c)
			}
		}
		return ""
	}
	return ""
}
