package release

import (
	"bufio"
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// The SBOM is an SPDX 2.3 JSON document (docs/release.md says why SPDX):
// the image's package CONTAINS each platform's binaries and the agent jar;
// a binary DEPENDS_ON the Go modules its embedded build information
// (debug/buildinfo) lists, with their go.sum h1 hashes; the jar CONTAINS the
// Maven artefacts shaded into it (Maven's resolution of agent/pom.xml's
// compile and runtime dependencies, the ones maven-shade-plugin includes).

// spdxDocument is the subset of SPDX 2.3's JSON schema the SBOM uses.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	DocumentDescribes []string           `json:"documentDescribes"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

// spdxPackage is an SPDX package. Comment carries a Go module's h1 hash:
// SPDX's checksum algorithms have no h1 (a SHA-256 over the module's file
// list, not over one file).
type spdxPackage struct {
	Name                  string         `json:"name"`
	SPDXID                string         `json:"SPDXID"`
	VersionInfo           string         `json:"versionInfo,omitempty"`
	DownloadLocation      string         `json:"downloadLocation"`
	FilesAnalyzed         bool           `json:"filesAnalyzed"`
	PrimaryPackagePurpose string         `json:"primaryPackagePurpose,omitempty"`
	Checksums             []spdxChecksum `json:"checksums,omitempty"`
	ExternalRefs          []spdxExtRef   `json:"externalRefs,omitempty"`
	Comment               string         `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExtRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

// MavenArtefact is a Maven artefact shaded into the agent jar.
type MavenArtefact struct {
	GroupID, ArtifactID, Version string
}

// String is groupId:artifactId:version.
func (m MavenArtefact) String() string { return m.GroupID + ":" + m.ArtifactID + ":" + m.Version }

// sbom collects packages with unique SPDX IDs.
type sbom struct {
	doc spdxDocument
	ids map[string]bool
	// byKey finds a package already added (a Go module shared by both
	// binaries) by its purl.
	byKey map[string]string
}

var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// add adds p (unless a package of the same key is there) and returns its ID.
func (s *sbom) add(key string, p spdxPackage) string {
	if id, ok := s.byKey[key]; ok && key != "" {
		return id
	}
	base := "SPDXRef-" + strings.Trim(spdxIDUnsafe.ReplaceAllString(p.SPDXID, "-"), "-")
	id := base
	for i := 2; s.ids[id]; i++ {
		id = fmt.Sprintf("%s-%d", base, i)
	}
	s.ids[id] = true
	if key != "" {
		s.byKey[key] = id
	}
	p.SPDXID = id
	if p.DownloadLocation == "" {
		p.DownloadLocation = "NOASSERTION"
	}
	s.doc.Packages = append(s.doc.Packages, p)
	return id
}

func (s *sbom) relate(from, rel, to string) {
	s.doc.Relationships = append(s.doc.Relationships, spdxRelationship{from, rel, to})
}

func purl(locator string) []spdxExtRef {
	return []spdxExtRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: locator}}
}

// writeSBOM writes the SPDX document of the image built into file.
func writeSBOM(ctx context.Context, o Options, version string, a Artefacts, img builtImage, file string) error {
	maven, err := AgentDependencies(ctx, filepath.Join(o.Repo, "agent"))
	if err != nil {
		return err
	}
	jarCoords, err := agentCoordinates(filepath.Join(o.Repo, "agent", "pom.xml"))
	if err != nil {
		return err
	}
	s := &sbom{ids: map[string]bool{}, byKey: map[string]string{}}
	digestHex := strings.TrimPrefix(a.IndexDigest, "sha256:")
	s.doc = spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              ImageRepository + "-v" + version,
		DocumentNamespace: sourceURL + "/spdx/" + ImageRepository + "-v" + version + "-" + digestHex,
		CreationInfo: spdxCreationInfo{Created: created(o.Date).Format(time.RFC3339),
			Creators: []string{"Tool: handlerkit-release-v" + version, "Organization: handlerkit"}},
	}
	repo, _, _ := strings.Cut(a.ImageRef, ":v"+version)
	imageID := s.add("", spdxPackage{Name: ImageRepository, SPDXID: "Image", VersionInfo: "v" + version,
		PrimaryPackagePurpose: "CONTAINER",
		Checksums:             []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: digestHex}},
		ExternalRefs:          purl("pkg:oci/" + ImageRepository + "@sha256%3A" + digestHex + "?repository_url=" + repo + "&tag=v" + version),
		Comment:               "The image index " + a.ImageRef + "; its checksum is the index's digest."})
	s.doc.DocumentDescribes = []string{imageID}
	s.relate("SPDXRef-DOCUMENT", "DESCRIBES", imageID)

	platforms := slices.Sorted(func(yield func(string) bool) {
		for p := range img.binaries {
			if !yield(p) {
				return
			}
		}
	})
	for _, p := range platforms {
		for _, b := range binaries {
			if err := addBinary(s, imageID, p, b.path, img.binaries[p][b.path], version); err != nil {
				return err
			}
		}
	}

	jarSum, err := sha256File(img.agentJar)
	if err != nil {
		return err
	}
	jarID := s.add("", spdxPackage{Name: jarCoords.GroupID + ":" + jarCoords.ArtifactID, SPDXID: "Jar-" + jarCoords.ArtifactID,
		VersionInfo: jarCoords.Version, PrimaryPackagePurpose: "LIBRARY",
		Checksums:    []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: jarSum}},
		ExternalRefs: purl("pkg:maven/" + jarCoords.GroupID + "/" + jarCoords.ArtifactID + "@" + jarCoords.Version),
		Comment:      "The java agent at " + AgentJarPath + ", with its dependencies shaded in."})
	s.relate(imageID, "CONTAINS", jarID)
	for _, m := range maven {
		id := s.add("maven:"+m.String(), spdxPackage{Name: m.GroupID + ":" + m.ArtifactID, SPDXID: "Maven-" + m.String(),
			VersionInfo: m.Version, PrimaryPackagePurpose: "LIBRARY",
			ExternalRefs: purl("pkg:maven/" + m.GroupID + "/" + m.ArtifactID + "@" + m.Version)})
		s.relate(jarID, "CONTAINS", id)
	}
	data, err := json.MarshalIndent(s.doc, "", "  ")
	if err != nil {
		return fmt.Errorf("release: SBOM: %w", err)
	}
	if err := os.WriteFile(file, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// addBinary adds one platform's binary and the Go modules it was built from.
func addBinary(s *sbom, imageID, platform, imagePath, file, version string) error {
	bi, err := buildinfo.ReadFile(file)
	if err != nil {
		return fmt.Errorf("release: SBOM: build info of %s: %w", file, err)
	}
	sum, err := sha256File(file)
	if err != nil {
		return err
	}
	name := filepath.Base(imagePath)
	binID := s.add("", spdxPackage{Name: name, SPDXID: "Binary-" + name + "-" + platform, VersionInfo: "v" + version,
		PrimaryPackagePurpose: "APPLICATION",
		Checksums:             []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: sum}},
		ExternalRefs:          purl("pkg:golang/" + bi.Main.Path + "@v" + version + "#" + strings.TrimPrefix(bi.Path, bi.Main.Path+"/")),
		Comment:               imagePath + " for " + platform + ", built by " + bi.GoVersion + " from " + bi.Path + "."})
	s.relate(imageID, "CONTAINS", binID)
	std := s.add("golang:stdlib@"+bi.GoVersion, spdxPackage{Name: "stdlib", SPDXID: "Go-stdlib-" + bi.GoVersion,
		VersionInfo: bi.GoVersion, PrimaryPackagePurpose: "LIBRARY", ExternalRefs: purl("pkg:golang/stdlib@" + bi.GoVersion)})
	s.relate(binID, "DEPENDS_ON", std)
	for _, d := range bi.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		p := spdxPackage{Name: m.Path, SPDXID: "Go-" + m.Path + "-" + m.Version, VersionInfo: m.Version,
			PrimaryPackagePurpose: "LIBRARY", ExternalRefs: purl("pkg:golang/" + m.Path + "@" + m.Version)}
		if m.Sum != "" {
			p.Comment = "go.sum " + m.Sum
		}
		id := s.add("golang:"+m.Path+"@"+m.Version, p)
		s.relate(binID, "DEPENDS_ON", id)
	}
	return nil
}

// mavenDependencyPlugin is the plugin AgentDependencies runs, pinned here:
// agent/pom.xml pins only the plugins of its build.
const mavenDependencyPlugin = "org.apache.maven.plugins:maven-dependency-plugin:2.8:list"

// AgentDependencies returns the Maven artefacts that the agent's build
// shades into its jar: Maven's resolution of agentDir/pom.xml's compile and
// runtime dependencies (maven-dependency-plugin's list), sorted. The jar
// keeps no pom.properties of them (the shade plugin's filters leave
// META-INF/maven out, so that the application sees no trace of them). Like
// the agent's build it runs Maven offline first, then online.
func AgentDependencies(ctx context.Context, agentDir string) ([]MavenArtefact, error) {
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return nil, fmt.Errorf("release: listing the agent's dependencies needs Maven (Debian: apt-get install maven): %w", err)
	}
	tmp, err := os.MkdirTemp("", "handlerkit-mvn-")
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "dependencies.txt")
	run := func(offline bool) ([]byte, error) {
		args := []string{"-q", "-B"}
		if offline {
			args = append(args, "-o")
		}
		args = append(args, "-f", filepath.Join(agentDir, "pom.xml"), mavenDependencyPlugin,
			"-DincludeScope=runtime", "-DoutputFile="+out, "-DbuildDirectory="+filepath.Join(tmp, "target"))
		cmd := exec.CommandContext(ctx, mvn, args...)
		cmd.Dir = tmp
		return cmd.CombinedOutput()
	}
	if _, err := run(true); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("release: mvn dependency:list: %w", ctx.Err())
		}
		if msg, err := run(false); err != nil {
			return nil, fmt.Errorf("release: mvn dependency:list: %w\n%s", err, msg)
		}
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	arts, err := parseDependencyList(data)
	if err != nil {
		return nil, err
	}
	if len(arts) == 0 {
		return nil, fmt.Errorf("release: Maven lists no dependency of %s", agentDir)
	}
	return arts, nil
}

// parseDependencyList reads dependency:list's output lines
// "group:artifact:type[:classifier]:version:scope", keeping the compile and
// runtime scopes.
func parseDependencyList(data []byte) ([]MavenArtefact, error) {
	var out []MavenArtefact
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || !strings.Contains(line, ":") || strings.HasSuffix(line, ":") {
			continue // the header, "The following files have been resolved:"
		}
		f := strings.Split(line, ":")
		if len(f) != 5 && len(f) != 6 {
			return nil, fmt.Errorf("release: dependency:list printed %q", line)
		}
		if scope := f[len(f)-1]; scope != "compile" && scope != "runtime" {
			continue
		}
		out = append(out, MavenArtefact{GroupID: f[0], ArtifactID: f[1], Version: f[len(f)-2]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return slices.Compact(out), nil
}

// agentCoordinates reads the agent's own groupId, artifactId and version
// from its pom.
func agentCoordinates(pom string) (MavenArtefact, error) {
	data, err := os.ReadFile(pom)
	if err != nil {
		return MavenArtefact{}, fmt.Errorf("release: %w", err)
	}
	var p struct {
		GroupID    string `xml:"groupId"`
		ArtifactID string `xml:"artifactId"`
		Version    string `xml:"version"`
	}
	if err := xml.Unmarshal(data, &p); err != nil {
		return MavenArtefact{}, fmt.Errorf("release: %s: %w", pom, err)
	}
	if p.GroupID == "" || p.ArtifactID == "" || p.Version == "" {
		return MavenArtefact{}, fmt.Errorf("release: %s names no groupId, artifactId and version", pom)
	}
	return MavenArtefact{GroupID: p.GroupID, ArtifactID: p.ArtifactID, Version: p.Version}, nil
}
