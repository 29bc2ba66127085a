package testimages

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// libraryDirs are searched, in order, for a DT_NEEDED library that the
// object's own directory (the JRE's $ORIGIN-relative libs) does not hold.
var libraryDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// slimRoot copies from the root filesystem src into dst only what running
// the program at top needs: top itself, a file (a binary such as
// /usr/bin/memcached) or a whole tree (the JRE at JavaHome, with its /etc
// configuration that Debian links in), every shared library its ELF objects
// need, transitively, and the dynamic loader. Symlinks are recreated, so the
// loader finds each library under the path it asks for. No shell or other
// tool is copied.
func slimRoot(src, dst, top string) error {
	c := &rootCopier{src: src, dst: dst, done: map[string]bool{}}
	var objects []string
	err := filepath.WalkDir(filepath.Join(src, top), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(p, src), "/")
		if err := c.copyPath(rel); err != nil {
			return err
		}
		if d.Type().IsRegular() && isELF(p) {
			objects = append(objects, rel)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("testimages: copying %s: %w", top, err)
	}
	seen := map[string]bool{}
	for len(objects) > 0 {
		obj := objects[0]
		objects = objects[1:]
		if seen[obj] {
			continue
		}
		seen[obj] = true
		needed, interp, err := elfDeps(c.real(obj))
		if err != nil {
			return fmt.Errorf("testimages: reading %s: %w", obj, err)
		}
		if interp != "" {
			if err := c.copyPath(interp); err != nil {
				return err
			}
			objects = append(objects, interp)
		}
		for _, lib := range needed {
			found := c.findLibrary(lib, path.Dir(obj))
			if found == "" {
				continue
			}
			if err := c.copyPath(found); err != nil {
				return err
			}
			objects = append(objects, found)
		}
	}
	return nil
}

func isELF(file string) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	magic := make([]byte, 4)
	_, err = io.ReadFull(f, magic)
	return err == nil && string(magic) == elf.ELFMAG
}

func elfDeps(file string) (needed []string, interp string, err error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	if needed, err = f.ImportedLibraries(); err != nil {
		return nil, "", err
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return nil, "", err
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	return needed, interp, nil
}

// rootCopier copies paths from one root filesystem into another, resolving
// symlinks inside src (never on the host).
type rootCopier struct {
	src, dst string
	done     map[string]bool
}

// real returns the host path of p inside src with symlinks resolved in src.
func (c *rootCopier) real(p string) string {
	r, err := c.resolve(p, 0)
	if err != nil {
		return filepath.Join(c.src, p)
	}
	return filepath.Join(c.src, r)
}

func (c *rootCopier) resolve(p string, depth int) (string, error) {
	if depth > 40 {
		return "", fmt.Errorf("too many symlinks at %s", p)
	}
	parts := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	cur := "/"
	for i, part := range parts {
		if part == "" {
			continue
		}
		next := path.Join(cur, part)
		fi, err := os.Lstat(filepath.Join(c.src, next))
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(filepath.Join(c.src, next))
			if err != nil {
				return "", err
			}
			if !path.IsAbs(target) {
				target = path.Join(cur, target)
			}
			rest := path.Join(append([]string{target}, parts[i+1:]...)...)
			return c.resolve(rest, depth+1)
		}
		cur = next
	}
	return cur, nil
}

// findLibrary returns the path of lib in the object's directory or the
// standard library directories, or "" when only an rpath would find it.
func (c *rootCopier) findLibrary(lib, objDir string) string {
	if strings.Contains(lib, "/") {
		return lib
	}
	for _, d := range append([]string{objDir}, libraryDirs...) {
		p := path.Join(d, lib)
		if _, err := os.Stat(c.real(p)); err == nil {
			return p
		}
	}
	// Either an $ORIGIN rpath finds it inside the JRE (copied whole), or
	// the distribution did not install it either (an optional feature such
	// as sound), in which case the full image lacks it just the same.
	return ""
}

// copyPath copies p (a file, directory or symlink in src) to the same path in
// dst, first recreating every symlink on the way and the link's target.
func (c *rootCopier) copyPath(p string) error {
	p = path.Clean(p)
	if c.done[p] {
		return nil
	}
	c.done[p] = true
	if dir := path.Dir(p); dir != "/" {
		if err := c.copyPath(dir); err != nil {
			return err
		}
	}
	srcPath := filepath.Join(c.src, p)
	dstPath := filepath.Join(c.dst, p)
	fi, err := os.Lstat(srcPath)
	if err != nil {
		return fmt.Errorf("testimages: %s: %w", p, err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(srcPath)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dstPath); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		abs := target
		if !path.IsAbs(abs) {
			abs = path.Join(path.Dir(p), target)
		}
		// A dangling link (a JDK's link to an optional package) stays
		// dangling, as in the source.
		if err := c.copyPath(abs); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	case fi.IsDir():
		if err := os.MkdirAll(dstPath, fi.Mode().Perm()); err != nil {
			return err
		}
		// An /etc directory a JRE config symlink points at is needed whole.
		if strings.HasPrefix(p, "/etc/java-") || strings.HasPrefix(p, "/etc/ssl/certs/java") {
			entries, err := os.ReadDir(srcPath)
			if err != nil {
				return err
			}
			for _, e := range entries {
				if err := c.copyPath(path.Join(p, e.Name())); err != nil {
					return err
				}
			}
		}
		return nil
	case fi.Mode().IsRegular():
		return copyRegular(srcPath, dstPath, fi.Mode().Perm())
	default:
		return nil
	}
}

func copyRegular(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
