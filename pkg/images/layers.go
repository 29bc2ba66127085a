package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// epoch is the modification time written into every tar entry so that layers
// built from the same content have the same digest.
var epoch = time.Unix(0, 0).UTC()

// File is one file placed into a layer by FilesLayer.
type File struct {
	// Path is the absolute path inside the image, for example "/pause".
	Path string
	// Source is a host file to copy. Exactly one of Source and Data is set.
	Source string
	// Data is the file's content when it does not come from the host.
	Data []byte
	// Mode is the permission bits; zero means 0o755 for Source and 0o644 for Data.
	Mode fs.FileMode
}

// FilesLayer builds a layer holding files, each owned by root, with their
// parent directories created as needed.
func FilesLayer(files ...File) (v1.Layer, error) {
	if len(files) == 0 {
		return nil, errors.New("images: FilesLayer needs at least one file")
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("images: file path %q must be absolute and clean", f.Path)
		}
		if (f.Source == "") == (f.Data == nil) {
			return nil, fmt.Errorf("images: file %s needs exactly one of Source and Data", f.Path)
		}
		data, mode := f.Data, f.Mode
		if f.Source != "" {
			b, err := os.ReadFile(f.Source)
			if err != nil {
				return nil, fmt.Errorf("images: file %s: %w", f.Path, err)
			}
			data = b
			if mode == 0 {
				mode = 0o755
			}
		} else if mode == 0 {
			mode = 0o644
		}
		rel := strings.TrimPrefix(f.Path, "/")
		if err := writeParents(tw, dirs, path.Dir(rel)); err != nil {
			return nil, err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: int64(mode.Perm()), Size: int64(len(data)),
			ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	content := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(content)), nil
	})
}

func writeParents(tw *tar.Writer, done map[string]bool, dir string) error {
	if dir == "." || dir == "" || done[dir] {
		return nil
	}
	if err := writeParents(tw, done, path.Dir(dir)); err != nil {
		return err
	}
	done[dir] = true
	return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: epoch,
		Format: tar.FormatPAX})
}

// TarballLayer uses an existing layer tarball (plain or gzip-compressed) as a
// layer. The file is read lazily, so it must stay in place until the image is
// written.
func TarballLayer(file string) (v1.Layer, error) {
	if _, err := os.Stat(file); err != nil {
		return nil, fmt.Errorf("images: layer tarball: %w", err)
	}
	return tarball.LayerFromFile(file, tarball.WithCompressionLevel(gzip.BestSpeed))
}

// WriteDirTarball writes the tree under dir into a layer tarball at out:
// ownership, permissions, symlinks and hard links are preserved, times are
// zeroed and entries are sorted so the result is reproducible. Device nodes,
// sockets and FIFOs are skipped: a container runtime provides /dev itself.
// The tarball is gzip-compressed when out ends in ".gz".
func WriteDirTarball(dir, out string) (err error) {
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("images: rootfs: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("images: rootfs %s is not a directory", dir)
	}
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	var w io.Writer = f
	var gz *gzip.Writer
	if strings.HasSuffix(out, ".gz") {
		gz, _ = gzip.NewWriterLevel(f, gzip.BestSpeed)
		w = gz
	}
	tw := tar.NewWriter(w)
	if err := addTree(tw, dir); err != nil {
		return fmt.Errorf("images: packing %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// DirLayer packs the tree under dir into a layer, buffering it in a temporary
// file under tmpDir (removed by the caller with tmpDir).
func DirLayer(dir, tmpDir string) (v1.Layer, error) {
	f, err := os.CreateTemp(tmpDir, "layer-*.tar")
	if err != nil {
		return nil, err
	}
	name := f.Name()
	f.Close()
	if err := WriteDirTarball(dir, name); err != nil {
		return nil, err
	}
	return TarballLayer(name)
}

func addTree(tw *tar.Writer, root string) error {
	links := map[uint64]string{} // inode -> first path, for hard links
	var walk func(rel string) error
	walk = func(rel string) error {
		full := filepath.Join(root, rel)
		entries, err := os.ReadDir(full)
		if err != nil {
			return err
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
		for _, e := range entries {
			childRel := path.Join(rel, e.Name())
			childFull := filepath.Join(root, childRel)
			info, err := os.Lstat(childFull)
			if err != nil {
				return err
			}
			mode := info.Mode()
			if mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeSocket|fs.ModeNamedPipe) != 0 {
				continue
			}
			link := ""
			if mode&fs.ModeSymlink != 0 {
				if link, err = os.Readlink(childFull); err != nil {
					return err
				}
			}
			hdr, err := tar.FileInfoHeader(info, link)
			if err != nil {
				return err
			}
			hdr.Name = childRel
			hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = epoch, time.Time{}, time.Time{}
			hdr.Uname, hdr.Gname = "", ""
			hdr.Format = tar.FormatPAX
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
				if mode.IsRegular() && st.Nlink > 1 {
					if first, seen := links[st.Ino]; seen {
						hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
					} else {
						links[st.Ino] = childRel
					}
				}
			}
			if mode.IsDir() {
				hdr.Name += "/"
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if hdr.Typeflag == tar.TypeReg {
				if err := copyFile(tw, childFull); err != nil {
					return err
				}
			}
			if mode.IsDir() {
				if err := walk(childRel); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk("")
}

func copyFile(w io.Writer, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
