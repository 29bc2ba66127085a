package atstart

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ImageEnv is what a container image's own config sets for its JVM, as the webhook read it from the image's
// registry before Mutate (pkg/inject/imageenv): Mutate itself does no I/O. A pod's env entry replaces the
// image's variable of the same name, so an image's JAVA_TOOL_OPTIONS (heap flags, a truststore, an agent of its
// own) would be lost if Mutate added the variable without it.
type ImageEnv struct {
	// Err says why the image's config could not be read (no registry reachable, credentials needed, a
	// timeout); empty when it was read.
	Err string
	// Env holds the JVM option variables the image sets (JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS, _JAVA_OPTIONS),
	// with their values; the image sets none when it is empty.
	Env map[string]string
	// Agents are the "-javaagent:" arguments of the image's entrypoint and command.
	Agents []string
}

// ImageEnvVars are the variables an ImageEnv keeps of an image's Env.
var ImageEnvVars = []string{JavaToolOptions, "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"}

// UnreadableImage is what Mutate does with a container whose image's config could not be read (ImageEnv.Err).
type UnreadableImage string

const (
	// UnreadableInject injects the container anyway, with a note that says so: if its image sets
	// JAVA_TOOL_OPTIONS, the pod's JAVA_TOOL_OPTIONS (the agent's option alone) replaces it. The default:
	// most JVM images set none, and clusters without a registry the webhook can read (air-gapped ones, images
	// loaded on the nodes) keep working.
	UnreadableInject UnreadableImage = "Inject"
	// UnreadableSkip leaves the container alone, with a note that says why.
	UnreadableSkip UnreadableImage = "Skip"
)

// imageVerdict judges a container that Mutate may inject by its image's config, when the webhook read it
// (Input.ImageEnv names the container): skip says why it is left alone, note what is worth saying of an
// injection anyway. A container whose env sets JAVA_TOOL_OPTIONS is not judged by its image's value, which the
// pod's replaces, but still by the image's other option variables and agents.
func (c checked) imageVerdict(ct *corev1.Container) (skip, note string) {
	ie, ok := c.ImageEnv[ct.Name]
	if !ok {
		return "", ""
	}
	if ie.Err != "" {
		if lastEnv(ct.Env, JavaToolOptions) >= 0 {
			return "", "" // the pod's value replaces the image's, whatever it is
		}
		if c.Unreadable == UnreadableSkip {
			return fmt.Sprintf("has an image whose config could not be read (%s), so its own %s is unknown",
				ie.Err, JavaToolOptions), ""
		}
		return "", fmt.Sprintf("container %s: its image's config could not be read (%s): if the image sets %s, the agent's option replaces it "+
			"(set %s in the container's env to choose)", ct.Name, ie.Err, JavaToolOptions, JavaToolOptions)
	}
	for _, name := range ImageEnvVars {
		if lastEnv(ct.Env, name) >= 0 {
			continue // the pod's value replaces the image's
		}
		v := ie.Env[name]
		if strings.Contains(v, "jmx_prometheus") {
			return "has an image that already loads jmx_exporter (its " + name + ")", ""
		}
		if strings.Contains(v, "-javaagent:"+MountPath+"/") {
			return "has an image that already loads an agent from " + MountPath + " (its " + name + ")", ""
		}
	}
	if len(ct.Command) == 0 {
		for _, a := range ie.Agents {
			if strings.Contains(a, "jmx_prometheus") {
				return "has an image that already loads jmx_exporter (" + a + ")", ""
			}
		}
	}
	return "", ""
}

// imageOptions is what the container's new JAVA_TOOL_OPTIONS starts with: the image's own value, with each "$"
// doubled (the kubelet expands $(VAR) in env values, and reads $$ as $; the JVM read the image's value as it
// is), and a space; "" when the image sets none or its config was not read.
func (c checked) imageOptions(container string) string {
	v := strings.TrimSpace(c.ImageEnv[container].Env[JavaToolOptions])
	if v == "" {
		return ""
	}
	return strings.ReplaceAll(v, "$", "$$") + " "
}
