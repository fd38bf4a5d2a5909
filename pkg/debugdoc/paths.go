package debugdoc

// Prefix is the path under which the monitoring server serves the
// documents; a document's Name follows it.
const Prefix = "/debug/"

// Names of the documents under Prefix (the keys of the hub's
// monitoring.Options.Debug).
const (
	RegistryzName   = "registryz"
	FederationzName = "federationz"
	TrustzName      = "trustz"
	SpokezName      = "spokez"
	ProxyStatusName = "proxystatusz"
	ClusterzName    = "clusterz"
	ConfigzName     = "configz"
	// ConfigStatusName takes ?kind=&namespace=&name= for one object.
	ConfigStatusName = "configstatusz"
	// ExplainzName takes ?proxy=&host=HOST[:PORT]&subset= (see Explainz).
	ExplainzName = "explainz"
)

// Paths of the documents.
const (
	RegistryzPath    = Prefix + RegistryzName
	FederationzPath  = Prefix + FederationzName
	TrustzPath       = Prefix + TrustzName
	SpokezPath       = Prefix + SpokezName
	ProxyStatusPath  = Prefix + ProxyStatusName
	ClusterzPath     = Prefix + ClusterzName
	ConfigzPath      = Prefix + ConfigzName
	ConfigStatusPath = Prefix + ConfigStatusName
	ExplainzPath     = Prefix + ExplainzName
)
