package testimages

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/handlerkit/handlerkit/pkg/images"
)

// Variants of the JVM application image for the operator's safety tests.
const (
	// TmpLinkJVMRef is the JVM application image whose /tmp is a symbolic
	// link to /var/tmp (mode 1777).
	TmpLinkJVMRef = "localhost/handlerkit/jvm-app-tmplink:v1"
	// Temurin25JVMRef is the JVM application image run by the Temurin 25
	// JDK (Temurin25Home) instead of Debian's JDK 17.
	Temurin25JVMRef = "localhost/handlerkit/jvm-app-temurin25:v1"
)

// Temurin25Home is where the Temurin 25 JDK is, on the host (installed by
// hand, as the pkg/jvm tests that run JDK 21 or later expect it) and in the
// Temurin25JVMRef image.
const Temurin25Home = "/usr/lib/jvm/temurin-25-jdk-amd64"

// BuildTmpLinkJVM writes the image TmpLinkJVMRef into dir, or returns the
// archive an earlier build left there: the JVMApp image with one more layer
// in which /tmp is a symbolic link to /var/tmp, a directory of mode 1777.
func BuildTmpLinkJVM(ctx context.Context, dir, cacheDir string, app JavaApp) (Archive, error) {
	return buildJVMImage(ctx, dir, cacheDir, app, jvmImage{name: "jvm-app-tmplink", ref: TmpLinkJVMRef, javaHome: JavaHome,
		stage: func(stage string) error {
			varTmp := filepath.Join(stage, "var", "tmp")
			if err := os.MkdirAll(varTmp, 0o755); err != nil {
				return err
			}
			if err := os.Chmod(filepath.Join(stage, "var"), 0o755); err != nil {
				return err
			}
			if err := os.Chmod(varTmp, 0o777|os.ModeSticky); err != nil {
				return err
			}
			// The upper layer's link hides the base layer's /tmp directory.
			return os.Symlink("/var/tmp", filepath.Join(stage, "tmp"))
		}})
}

// temurinSkipped are the parts of the JDK a running JVM never reads (sources,
// headers, manuals, the compiler's symbol file); they stay out of the image.
var temurinSkipped = map[string]bool{"lib/src.zip": true, "lib/ct.sym": true, "include": true, "man": true,
	"jmods": true, "demo": true}

// BuildTemurin25JVM writes the image Temurin25JVMRef into dir, or returns the
// archive an earlier build with the same inputs left there: the JVMApp image
// with one more layer holding the host's Temurin 25 JDK at Temurin25Home
// (without sources, headers and manuals), which runs the app. It fails when
// the host has no JDK there.
func BuildTemurin25JVM(ctx context.Context, dir, cacheDir string, app JavaApp) (Archive, error) {
	release, err := os.ReadFile(filepath.Join(Temurin25Home, "release"))
	if err != nil {
		return Archive{}, fmt.Errorf("testimages: no Temurin 25 JDK: %w", err)
	}
	sum := sha256.Sum256(release)
	return buildJVMImage(ctx, dir, cacheDir, app, jvmImage{name: fmt.Sprintf("jvm-app-temurin25-%x", sum[:8]),
		ref: Temurin25JVMRef, javaHome: Temurin25Home,
		stage: func(stage string) error {
			return stageTree(Temurin25Home, filepath.Join(stage, Temurin25Home), temurinSkipped)
		}})
}

// jvmImage describes one image of the JVM application: the cached Debian
// root filesystem with the JRE, an optional layer that stage fills, and the
// app, run by javaHome's java.
type jvmImage struct {
	name, ref, javaHome string
	// stage, when set, fills a directory that becomes the layer between the
	// root filesystem and the app.
	stage func(stage string) error
}

// buildJVMImage writes the image im into dir, or returns the archive an
// earlier build with the same inputs left there.
func buildJVMImage(ctx context.Context, dir, cacheDir string, app JavaApp, im jvmImage) (Archive, error) {
	name, err := archiveName(im.name, app)
	if err != nil {
		return Archive{}, err
	}
	if a, ok := cached(dir, name, im.ref); ok {
		return a, nil
	}
	_, base, err := JVMRootfs(ctx, cacheDir)
	if err != nil {
		return Archive{}, err
	}
	baseLayer, err := images.TarballLayer(base)
	if err != nil {
		return Archive{}, err
	}
	layers := []v1.Layer{baseLayer}
	if im.stage != nil {
		stage, err := os.MkdirTemp(dir, ".stage-")
		if err != nil {
			return Archive{}, err
		}
		defer os.RemoveAll(stage)
		if err := im.stage(stage); err != nil {
			return Archive{}, err
		}
		extra, err := images.DirLayer(stage, dir)
		if err != nil {
			return Archive{}, err
		}
		layers = append(layers, extra)
		defer removeLayerTemps(dir)
	}
	top, cmd, err := appLayer(app)
	if err != nil {
		return Archive{}, err
	}
	cmd[0] = im.javaHome + "/bin/java"
	return writeImage(dir, name, images.Spec{
		Ref:        im.ref,
		Layers:     append(layers, top),
		Cmd:        cmd,
		Env:        []string{"JAVA_HOME=" + im.javaHome},
		WorkingDir: AppDir,
	})
}

// stageTree recreates the tree src at dst (creating dst's parents, mode
// 0755), leaving out the paths in skip (relative to src): directories and
// symbolic links are recreated, regular files hard-linked, or copied when a
// link is not possible.
func stageTree(src, dst string, skip map[string]bool) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if skip[filepath.ToSlash(rel)] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		out := filepath.Join(dst, rel)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, out)
		case info.IsDir():
			if err := os.Mkdir(out, info.Mode().Perm()); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			return os.Chmod(out, info.Mode().Perm())
		case info.Mode().IsRegular():
			if err := os.Link(p, out); err == nil {
				return nil
			}
			return copyRegular(p, out, info.Mode().Perm())
		default:
			return nil
		}
	})
}
