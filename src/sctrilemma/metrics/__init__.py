"""Trilemma metrics: identity, context invariance and expression fidelity, as pure functions over arrays."""

from ._cohort import (
    celltype_retrieval,
    conditional_donor_bras,
    local_donor_mixing,
    program_neighbor_spearman,
    program_scores,
    residual_donor_invariance,
    state_retrieval,
)
from ._context import bras, conditional_ilisi, ilisi, log1p_cp10k_pca, modality_asw, modality_r2, pcr_comparison
from ._errors import MetricSkipped
from ._fidelity import (
    contrast_logfc,
    deg_sign_concordance,
    differential_expression_concordance,
    hvg_pearson,
    log1p_cp10k,
    logfc_spearman,
    reconstruction_agreement,
    top_deg_jaccard,
)
from ._identity import asw_label, clisi, exact_neighbors, isolated_labels, nmi_ari_kmeans
from ._interventions import centroid_shrinkage, donor_centering, kmeans_labels, latent_refinement
from ._pathways import (
    overrepresentation_test,
    pathway_concordance,
    pathway_jaccard,
    pathway_score_spearman,
    read_gmt,
    top_regulated_genes,
    top_terms,
)
from ._sampling import cohort_subsample, cohort_subsamples, stratified_subsample, stratified_subsamples

__all__ = [
    "MetricSkipped",
    "asw_label",
    "bras",
    "celltype_retrieval",
    "centroid_shrinkage",
    "clisi",
    "cohort_subsample",
    "cohort_subsamples",
    "conditional_donor_bras",
    "conditional_ilisi",
    "contrast_logfc",
    "deg_sign_concordance",
    "differential_expression_concordance",
    "donor_centering",
    "exact_neighbors",
    "hvg_pearson",
    "ilisi",
    "isolated_labels",
    "kmeans_labels",
    "latent_refinement",
    "local_donor_mixing",
    "log1p_cp10k",
    "log1p_cp10k_pca",
    "logfc_spearman",
    "modality_asw",
    "modality_r2",
    "nmi_ari_kmeans",
    "overrepresentation_test",
    "pathway_concordance",
    "pathway_jaccard",
    "pathway_score_spearman",
    "pcr_comparison",
    "program_neighbor_spearman",
    "program_scores",
    "read_gmt",
    "reconstruction_agreement",
    "residual_donor_invariance",
    "state_retrieval",
    "stratified_subsample",
    "stratified_subsamples",
    "top_deg_jaccard",
    "top_regulated_genes",
    "top_terms",
]
