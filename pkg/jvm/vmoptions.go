package jvm

import (
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxArgfileSize bounds an @argfile read from the target.
const maxArgfileSize = 1 << 20

// vmOptions returns the JVM options of process pid, whose command line is args, in the order HotSpot applies
// them, so that the last setting of a flag wins: JAVA_TOOL_OPTIONS, then the java launcher's options, which are
// JDK_JAVA_OPTIONS followed by the command line up to the main class, with @argfiles expanded in both as the
// launcher expands them, then _JAVA_OPTIONS. Options in files named by -XX:Flags or -XX:VMOptionsFile are not
// read; the attach protocol's own refusals cover them.
func vmOptions(pid int, args []string) []string {
	env := processEnv(pid)
	read := func(name string) ([]byte, bool) { return readTargetArgfile(pid, name) }
	var launcher []string
	if len(args) > 0 {
		launcher = append(launcher, args[0])
	}
	launcher = append(launcher, splitOptions(env["JDK_JAVA_OPTIONS"])...)
	if len(args) > 1 {
		launcher = append(launcher, args[1:]...)
	}
	var all []string
	all = append(all, splitOptions(env["JAVA_TOOL_OPTIONS"])...)
	all = append(all, launcherOptions(launcher, read)...)
	all = append(all, splitOptions(env["_JAVA_OPTIONS"])...)
	return all
}

// processEnv returns the environment process pid started with.
func processEnv(pid int) map[string]string {
	env := map[string]string{}
	data, err := os.ReadFile(path.Join(procRoot, strconv.Itoa(pid), "environ"))
	if err != nil {
		return env
	}
	for _, kv := range ParseCmdline(data) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// splitOptions splits an option environment variable as HotSpot and the launcher do: at white space, except
// inside single or double quotes, which are removed.
func splitOptions(s string) []string {
	var out []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case isSpace(c):
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// ParseArgfile splits the contents of a java launcher @argfile into arguments: separated by white space; a #
// between arguments starts a comment to the end of the line; single or double quotes keep white space and are
// removed, and inside them a backslash escapes the next character (\n, \t, \r and \f as in C) or, before a
// line end, continues the argument on the next line without its leading white space.
func ParseArgfile(data []byte) []string {
	var out []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0 && c == '\\' && i+1 < len(data):
			i++
			switch data[i] {
			case 'n':
				cur.WriteByte('\n')
			case 't':
				cur.WriteByte('\t')
			case 'r':
				cur.WriteByte('\r')
			case 'f':
				cur.WriteByte('\f')
			case '\n', '\r':
				for i+1 < len(data) && isSpace(data[i+1]) {
					i++
				}
			default:
				cur.WriteByte(data[i])
			}
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case isSpace(c):
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		case c == '#' && !in:
			for i+1 < len(data) && data[i+1] != '\n' && data[i+1] != '\r' {
				i++
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// launcherOptions returns the options the java launcher hands to the JVM from its arguments (args[0] is the
// launcher itself): everything before the main class, the jar after -jar or the module after -m, since what
// follows belongs to the application. An argument @file is replaced by the arguments in file, as the launcher
// does from JDK 9 on: not inside an argfile, not after --disable-@files, and @@x stands for the literal @x.
// read returns a file's contents, or false when it cannot be read (it then contributes nothing).
func launcherOptions(args []string, read func(name string) ([]byte, bool)) []string {
	type arg struct {
		s        string
		fromFile bool
	}
	var queue []arg
	for _, a := range args[min(1, len(args)):] {
		queue = append(queue, arg{s: a})
	}
	var out []string
	expand, wantValue := true, false
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		if expand && !a.fromFile && strings.HasPrefix(a.s, "@") {
			if !strings.HasPrefix(a.s, "@@") {
				var inserted []arg
				if data, ok := read(a.s[1:]); ok {
					for _, s := range ParseArgfile(data) {
						inserted = append(inserted, arg{s: s, fromFile: true})
					}
				}
				queue = append(inserted, queue...)
				continue
			}
			a.s = a.s[1:]
		}
		switch {
		case wantValue:
			wantValue = false
		case a.s == "--disable-@files":
			expand = false
		case a.s == "-jar", a.s == "-m", a.s == "--module", strings.HasPrefix(a.s, "--module="):
			return out
		case launcherOptionsWithValue[a.s]:
			wantValue = true
		case !strings.HasPrefix(a.s, "-"):
			return out // the main class, or a source file
		}
		out = append(out, a.s)
	}
	return out
}

// readTargetArgfile reads an @argfile of process pid as the launcher did: an absolute name inside the target's
// root, a relative one from the process's working directory.
func readTargetArgfile(pid int, name string) ([]byte, bool) {
	root, err := openTargetRoot(pid)
	if err != nil {
		return nil, false
	}
	defer root.Close()
	if !path.IsAbs(name) {
		cwd, ok := targetCwd(pid, root)
		if !ok {
			return readBeneathCwd(pid, name)
		}
		name = path.Join(cwd, name)
	}
	data, err := root.readFile(name, maxArgfileSize)
	return data, err == nil
}

// readBeneathCwd reads name relative to the working directory of pid when the directory has no path in the
// target's root (it may be hidden by a mount), allowing only files beneath it.
func readBeneathCwd(pid int, name string) ([]byte, bool) {
	dir, err := unix.Open(path.Join(procRoot, strconv.Itoa(pid), "cwd"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(dir)
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(dir, name, &how)
	if err != nil {
		return nil, false
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, false
	}
	data, err := io.ReadAll(io.LimitReader(f, maxArgfileSize))
	return data, err == nil
}

// targetCwd returns the working directory of pid as a path inside the target's root. The link /proc/<pid>/cwd
// names it as this process would see it; it is used only when that path, resolved in the target's root, is the
// very directory the process works in.
func targetCwd(pid int, root *targetRoot) (string, bool) {
	link := path.Join(procRoot, strconv.Itoa(pid), "cwd")
	p, err := os.Readlink(link)
	if err != nil || !path.IsAbs(p) {
		return "", false
	}
	var want, got unix.Stat_t
	if err := unix.Stat(link, &want); err != nil {
		return "", false
	}
	fd, err := root.open(p, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return "", false
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &got); err != nil || got.Dev != want.Dev || got.Ino != want.Ino {
		return "", false
	}
	return p, true
}
