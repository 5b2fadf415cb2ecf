module recluster.local/pause

go 1.21
