package intern

import "hash/maphash"

// Canonical returns the live canonical copy of s, if the table has one.
func Canonical(s string) (string, bool) { return lookupCanonical(s, maphash.String(seed, s)) }

// TableLen is the number of entries in the table, swept or not.
var TableLen = tableLen
