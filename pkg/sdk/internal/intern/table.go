package intern

import (
	"strings"
	"sync"
	"unsafe"
	"weak"
)

// The table of canonical strings.
//
// The standard library's unique package cannot serve here: it holds weakly
// the small cell of a Handle, not the string's bytes, so once no Handle is
// left (and an interned object holds the string, never a Handle) the next
// garbage collection drops the entry while the objects still share the
// bytes, and the next object gets a new canonical copy. Interning then
// shares strings only between objects cached between two collections, and
// an informer's initial list runs through many.
//
// This table holds a weak pointer to the canonical copy's bytes instead:
// the entry lives exactly as long as some object holds the string. Its key
// is a copy of its own, which is what an entry costs beside the map's slot
// and the weak pointer's record; only strings that two objects hold are
// ever entered (see sightings), and there are few of those: label keys and
// values, images, owner references, enum values. Entries whose string was
// collected are swept once the shard has taken as many insertions as it
// kept entries at its last sweep (and at least minSweep), which keeps the
// sweeping amortized O(1) per insertion and a shard at most about twice
// the size it had after its last sweep, plus minSweep.

// shards spreads the table over locks: informers of several kinds intern
// at once.
const shards = 32

// minSweep is the fewest insertions between two sweeps of a shard.
const minSweep = 64

// shard is one lock's part of the table.
type shard struct {
	mu sync.Mutex
	// m maps a string to a weak pointer to its canonical copy's first byte.
	m map[string]weak.Pointer[byte]
	// inserted counts insertions since the last sweep.
	inserted int
	// kept is the number of entries the last sweep kept.
	kept int
}

var table [shards]shard

// canonicalCopy returns the canonical copy of s, which is not empty, making
// s's own copy canonical when there is none; h is a hash of s.
func canonicalCopy(s string, h uint64) string {
	sh := &table[h%shards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c, ok := sh.lookup(s); ok {
		return c
	}
	if sh.m == nil {
		sh.m = map[string]weak.Pointer[byte]{}
	}
	if sh.inserted++; sh.inserted >= max(minSweep, sh.kept) {
		sh.sweep()
	}
	// A copy of its own, so that the canonical string never keeps alive a
	// larger buffer s may be a part of; the key is another, which the
	// entry holds strongly.
	c := strings.Clone(s)
	sh.m[strings.Clone(s)] = weak.Make(unsafe.StringData(c))
	return c
}

// lookup returns the live canonical copy of s, if the shard has one.
func (sh *shard) lookup(s string) (string, bool) {
	wp, ok := sh.m[s]
	if !ok {
		return "", false
	}
	b := wp.Value()
	if b == nil {
		return "", false
	}
	return unsafe.String(b, len(s)), true
}

// sweep drops the entries whose canonical copy was collected.
func (sh *shard) sweep() {
	for k, wp := range sh.m {
		if wp.Value() == nil {
			delete(sh.m, k)
		}
	}
	sh.inserted = 0
	sh.kept = len(sh.m)
}

// lookupCanonical returns the live canonical copy of s, if there is one,
// without making one.
func lookupCanonical(s string, h uint64) (string, bool) {
	sh := &table[h%shards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.lookup(s)
}

// tableLen returns the number of entries in the table, live or not yet
// swept.
func tableLen() int {
	n := 0
	for i := range table {
		table[i].mu.Lock()
		n += len(table[i].m)
		table[i].mu.Unlock()
	}
	return n
}
