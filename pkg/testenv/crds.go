package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// InstallCRDs creates the CRDs (or updates those that exist) and waits until
// every one is Established, that is, served by the apiserver.
func (e *Environment) InstallCRDs(ctx context.Context, crds ...*apiextensionsv1.CustomResourceDefinition) error {
	client, err := apiextensionsclient.NewForConfig(e.Config())
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	crdClient := client.ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range crds {
		if crd == nil {
			return errors.New("testenv: InstallCRDs given a nil CRD")
		}
		_, err := crdClient.Create(ctx, crd.DeepCopy(), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var existing *apiextensionsv1.CustomResourceDefinition
			existing, err = crdClient.Get(ctx, crd.Name, metav1.GetOptions{})
			if err == nil {
				update := crd.DeepCopy()
				update.ResourceVersion = existing.ResourceVersion
				_, err = crdClient.Update(ctx, update, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("testenv: installing CRD %s: %w", crd.Name, err)
		}
	}
	for _, crd := range crds {
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := crdClient.Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.NamesAccepted && c.Status == apiextensionsv1.ConditionFalse {
					return false, fmt.Errorf("names not accepted: %s", c.Message)
				}
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("testenv: CRD %s not Established: %w", crd.Name, err)
		}
	}
	return nil
}

// InstallCRDsFromDir installs every CustomResourceDefinition found in the
// .yaml, .yml and .json files of dir (multi-document files included; other
// kinds in the same files, such as example resources, are ignored) and
// returns them once all are Established.
func (e *Environment) InstallCRDsFromDir(ctx context.Context, dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	crds, err := ReadCRDs(dir)
	if err != nil {
		return nil, err
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("testenv: no CustomResourceDefinition in %s", dir)
	}
	return crds, e.InstallCRDs(ctx, crds...)
}

// ReadCRDs parses the CustomResourceDefinitions in the manifest files of dir.
func ReadCRDs(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("testenv: reading CRD dir: %w", err)
	}
	var names []string
	for _, entry := range entries {
		switch strings.ToLower(filepath.Ext(entry.Name())) {
		case ".yaml", ".yml", ".json":
			if !entry.IsDir() {
				names = append(names, entry.Name())
			}
		}
	}
	sort.Strings(names)
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, name := range names {
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("testenv: %w", err)
		}
		decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var typeMeta metav1.TypeMeta
			var raw json.RawMessage
			if err := decoder.Decode(&raw); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("testenv: parsing %s: %w", path, err)
			}
			if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
				continue
			}
			if err := json.Unmarshal(raw, &typeMeta); err != nil {
				return nil, fmt.Errorf("testenv: parsing %s: %w", path, err)
			}
			if typeMeta.Kind != "CustomResourceDefinition" {
				continue
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := json.Unmarshal(raw, crd); err != nil {
				return nil, fmt.Errorf("testenv: parsing CRD in %s: %w", path, err)
			}
			crds = append(crds, crd)
		}
	}
	return crds, nil
}
