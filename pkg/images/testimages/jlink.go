package testimages

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// JlinkJVMRef is the JVM application image run by a runtime built with
// jlink from the Temurin 25 JDK with only the modules the application needs
// (JlinkModules): no java.instrument, so a JVM started with a -javaagent
// ends before main ("Module java.instrument not found"), while the
// application alone runs.
const JlinkJVMRef = "localhost/handlerkit/jvm-app-jlink:v1"

// JlinkHome is where the jlink runtime is in the JlinkJVMRef image.
const JlinkHome = "/opt/jlink-runtime"

// JlinkModules are the modules of the JlinkJVMRef runtime: the sample
// application's (it registers MBeans) and the HTTP server, without
// java.instrument.
var JlinkModules = []string{"java.base", "java.management", "java.logging", "jdk.httpserver"}

// BuildJlinkJVM writes the image JlinkJVMRef into dir, or returns the archive
// an earlier build with the same inputs left there: the JVMApp image with one
// more layer holding a runtime that the host's Temurin 25 jlink builds with
// JlinkModules, which runs the app. It fails when the host has no Temurin 25
// JDK with its jmods.
func BuildJlinkJVM(ctx context.Context, dir, cacheDir string, app JavaApp) (Archive, error) {
	release, err := os.ReadFile(filepath.Join(Temurin25Home, "release"))
	if err != nil {
		return Archive{}, fmt.Errorf("testimages: no Temurin 25 JDK: %w", err)
	}
	sum := sha256.Sum256(append(release, []byte(strings.Join(JlinkModules, ","))...))
	return buildJVMImage(ctx, dir, cacheDir, app, jvmImage{name: fmt.Sprintf("jvm-app-jlink-%x", sum[:8]),
		ref: JlinkJVMRef, javaHome: JlinkHome,
		stage: func(stage string) error {
			out := filepath.Join(stage, JlinkHome)
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				return err
			}
			cmd := exec.CommandContext(ctx, filepath.Join(Temurin25Home, "bin", "jlink"),
				"--module-path", filepath.Join(Temurin25Home, "jmods"), "--add-modules", strings.Join(JlinkModules, ","),
				"--no-header-files", "--no-man-pages", "--strip-debug", "--output", out)
			if b, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("testimages: jlink: %w: %s", err, b)
			}
			return nil
		}})
}
