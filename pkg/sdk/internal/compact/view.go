package compact

import (
	"k8s.io/client-go/tools/cache"
)

// View is a cache.Indexer whose reads return every cache entry as a copy
// of the reader's own (Expand): an Object decoded, a Decoded deep-copied.
// Writes and key-only reads go to the cache unchanged.
type View struct {
	cache.Indexer
}

// NewView returns the decoding view of idx; nil stays nil.
func NewView(idx cache.Indexer) cache.Indexer {
	if idx == nil {
		return nil
	}
	return View{Indexer: idx}
}

// Unwrap returns the cache behind a View, or idx itself.
func Unwrap(idx cache.Indexer) cache.Indexer {
	if v, ok := idx.(View); ok {
		return v.Indexer
	}
	return idx
}

// List returns every cached object, decoded. An object that cannot be
// decoded, which only corrupt memory could cause, is left out: List has no
// error to report.
func (v View) List() []any {
	return expandAll(v.Indexer.List(), nil)
}

// Get returns the cached object with obj's key, decoded.
func (v View) Get(obj any) (any, bool, error) {
	return expandOne(v.Indexer.Get(obj))
}

// GetByKey returns the cached object with key, decoded.
func (v View) GetByKey(key string) (any, bool, error) {
	return expandOne(v.Indexer.GetByKey(key))
}

// Index returns the cached objects that share an index value with obj,
// decoded.
func (v View) Index(indexName string, obj any) ([]any, error) {
	objs, err := v.Indexer.Index(indexName, obj)
	if err != nil {
		return nil, err
	}
	var firstErr error
	return expandAll(objs, &firstErr), firstErr
}

// ByIndex returns the cached objects whose index value is indexedValue,
// decoded.
func (v View) ByIndex(indexName, indexedValue string) ([]any, error) {
	objs, err := v.Indexer.ByIndex(indexName, indexedValue)
	if err != nil {
		return nil, err
	}
	var firstErr error
	return expandAll(objs, &firstErr), firstErr
}

// expandOne decodes the result of a single read.
func expandOne(obj any, exists bool, err error) (any, bool, error) {
	if err != nil || !exists {
		return obj, exists, err
	}
	d, _, err := Expand(obj)
	if err != nil {
		return nil, false, err
	}
	return d, true, nil
}

// expandAll decodes objs in place of a new slice, leaving out what cannot
// be decoded and recording the first such error in firstErr, when given.
func expandAll(objs []any, firstErr *error) []any {
	out := make([]any, 0, len(objs))
	for _, obj := range objs {
		d, _, err := Expand(obj)
		if err != nil {
			if firstErr != nil && *firstErr == nil {
				*firstErr = err
			}
			continue
		}
		if d == nil {
			out = append(out, obj)
			continue
		}
		out = append(out, d)
	}
	return out
}
