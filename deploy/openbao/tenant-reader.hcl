# What ESO may read for an ExternalSecret (role ayatori-tenant-reader): the
# KV v2 records of the namespace the ServiceAccount it logged in with lives
# in, as OpenBao's Kubernetes auth verified it, and nothing else: no list,
# no metadata, no other namespace's records. ESO logs in with the
# ServiceAccount ayatori-secrets-reader of the ExternalSecret's own
# namespace (referent authentication of the ClusterSecretStore).
path "{{.KVMount}}/data/{{.BasePath}}/{{"{{"}}identity.entity.aliases.{{.Accessor}}.metadata.service_account_namespace{{"}}"}}/*" {
  capabilities = ["read"]
}
