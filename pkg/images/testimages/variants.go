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
	name, err := archiveName("jvm-app-tmplink", app)
	if err != nil {
		return Archive{}, err
	}
	if a, ok := cached(dir, name, TmpLinkJVMRef); ok {
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
	stage, err := os.MkdirTemp(dir, ".tmplink-")
	if err != nil {
		return Archive{}, err
	}
	defer os.RemoveAll(stage)
	varTmp := filepath.Join(stage, "var", "tmp")
	if err := os.MkdirAll(varTmp, 0o755); err != nil {
		return Archive{}, err
	}
	if err := os.Chmod(filepath.Join(stage, "var"), 0o755); err != nil {
		return Archive{}, err
	}
	if err := os.Chmod(varTmp, 0o777|os.ModeSticky); err != nil {
		return Archive{}, err
	}
	// The upper layer's link hides the base layer's /tmp directory.
	if err := os.Symlink("/var/tmp", filepath.Join(stage, "tmp")); err != nil {
		return Archive{}, err
	}
	link, err := images.DirLayer(stage, dir)
	if err != nil {
		return Archive{}, err
	}
	top, cmd, err := appLayer(app)
	if err != nil {
		return Archive{}, err
	}
	archive, err := writeImage(dir, name, images.Spec{
		Ref:        TmpLinkJVMRef,
		Layers:     []v1.Layer{baseLayer, link, top},
		Cmd:        cmd,
		Env:        []string{"JAVA_HOME=" + JavaHome},
		WorkingDir: AppDir,
	})
	removeLayerTemps(dir)
	return archive, err
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
	name, err := archiveName(fmt.Sprintf("jvm-app-temurin25-%x", sum[:8]), app)
	if err != nil {
		return Archive{}, err
	}
	if a, ok := cached(dir, name, Temurin25JVMRef); ok {
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
	stage, err := os.MkdirTemp(dir, ".temurin-")
	if err != nil {
		return Archive{}, err
	}
	defer os.RemoveAll(stage)
	if err := stageTree(Temurin25Home, filepath.Join(stage, Temurin25Home), temurinSkipped); err != nil {
		return Archive{}, err
	}
	jdk, err := images.DirLayer(stage, dir)
	if err != nil {
		return Archive{}, err
	}
	top, cmd, err := appLayer(app)
	if err != nil {
		return Archive{}, err
	}
	cmd[0] = Temurin25Home + "/bin/java"
	archive, err := writeImage(dir, name, images.Spec{
		Ref:        Temurin25JVMRef,
		Layers:     []v1.Layer{baseLayer, jdk, top},
		Cmd:        cmd,
		Env:        []string{"JAVA_HOME=" + Temurin25Home},
		WorkingDir: AppDir,
	})
	removeLayerTemps(dir)
	return archive, err
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
