package jvm

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// The seed corpora live in testdata/fuzz/<FuzzName>/; f.Add adds a few more inline.

func FuzzParseReply(f *testing.F) {
	f.Add("load", []byte("0\nreturn code: 0\n"))
	f.Add("load", []byte("0\n102\n"))
	f.Fuzz(func(t *testing.T, cmd string, data []byte) {
		r, err := ParseReply(cmd, data)
		if err != nil {
			return
		}
		if r.Status != 0 && r.Format != ReplyFailed {
			t.Fatalf("status %d with format %s", r.Status, r.Format)
		}
		err = r.Err()
		if r.Status != 0 && err == nil {
			t.Fatalf("failed status %d gave no error", r.Status)
		}
		if err != nil && ReasonOf(err) == "" {
			t.Fatalf("error without reason: %v", err)
		}
	})
}

func FuzzParseStatus(f *testing.F) {
	f.Add([]byte(statusJVMInContainer))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseStatus(data)
		if err != nil {
			return
		}
		if s.PID <= 0 || s.NSPID() <= 0 {
			t.Fatalf("accepted non-positive pid: %+v", s)
		}
		for _, id := range append(s.UID[:], s.GID[:]...) {
			if id < 0 {
				t.Fatalf("accepted negative id: %+v", s)
			}
		}
	})
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1 (java) S 0 1 1 0 -1 4194560 1 0 0 0 5 3 0 0 20 0 20 0 987654 1000 100\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParseStat(data)
		if err != nil {
			return
		}
		if st.PID <= 0 {
			t.Fatalf("accepted pid %d", st.PID)
		}
	})
}

func FuzzParseNetTCP(f *testing.F) {
	f.Add([]byte(netTCP))
	f.Add([]byte(netTCP6))
	f.Fuzz(func(t *testing.T, data []byte) {
		socks, err := ParseNetTCP(data)
		if err != nil {
			return
		}
		for _, s := range socks {
			if s.LocalPort < 0 || s.LocalPort > 65535 || s.RemotePort < 0 || s.RemotePort > 65535 {
				t.Fatalf("port out of range: %+v", s)
			}
			if len(s.LocalIP) != 4 && len(s.LocalIP) != 16 {
				t.Fatalf("address of %d bytes", len(s.LocalIP))
			}
		}
	})
}

func FuzzParseInjectResult(f *testing.F) {
	f.Add([]byte(`{"pid":10,"nspid":1,"status":"ok","port":9404}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseInjectResult(data)
		if err != nil {
			return
		}
		line, err := r.MarshalLine()
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		again, err := ParseInjectResult(line)
		if err != nil {
			t.Fatalf("re-parse %s: %v", line, err)
		}
		if !reflect.DeepEqual(r, again) {
			t.Fatalf("round trip changed %+v to %+v", r, again)
		}
	})
}

func FuzzValidateExporterConfig(f *testing.F) {
	f.Add([]byte(validConfig))
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = ValidateExporterConfig(data)
	})
}

func FuzzParseArgfile(f *testing.F) {
	f.Add([]byte("# options\n-Xmx64m \"-Dname=a b\" '-XX:-EnableDynamicAgentLoading'\n"))
	f.Add([]byte("\"-Dlong=a\\\n   b\" -Dtab=\"x\\ty\" -Dhash=a#b"))
	f.Fuzz(func(t *testing.T, data []byte) {
		args := ParseArgfile(data)
		if bytes.ContainsAny(data, "\"'#\\") {
			return
		}
		// Without quotes, comments or escapes an argfile is white-space separated words.
		words := strings.FieldsFunc(string(data), func(r rune) bool { return r < 0x80 && isSpace(byte(r)) })
		if len(words) == 0 {
			words = nil
		}
		if !reflect.DeepEqual(args, words) {
			t.Fatalf("ParseArgfile(%q) = %q, want %q", data, args, words)
		}
	})
}

func FuzzParseMountInfo(f *testing.F) {
	f.Add([]byte("36 35 98:0 /var/lib/kubelet/pods/ab/volumes/kubernetes.io~empty-dir/tmp /tmp rw master:1 - ext4 /dev/root rw\n"))
	f.Add([]byte("1 0 0:1 /a\\040b /m\\134 rw - tmpfs tmpfs rw\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for id, m := range ParseMountInfo(data) {
			if m.ID != id {
				t.Fatalf("mount under id %d has id %d", id, m.ID)
			}
		}
	})
}

func FuzzDecodeConfigEnv(f *testing.F) {
	enc, err := EncodeConfigEnv([]byte(validConfig))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(enc)
	f.Add("rules: []\n")
	f.Fuzz(func(t *testing.T, value string) {
		data, err := DecodeConfigEnv(value)
		if err != nil {
			if ReasonOf(err) != ReasonConfigInvalid {
				t.Fatalf("error %v has reason %s", err, ReasonOf(err))
			}
			return
		}
		if len(data) > MaxConfigSize {
			t.Fatalf("decoded %d bytes, more than %d", len(data), MaxConfigSize)
		}
	})
}
