<?xml version="1.0"?>
<!-- Renames order to purchase and buyerID to buyer; everything else is copied. -->
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output omit-xml-declaration="yes"/>
  <xsl:template match="@*|node()">
    <xsl:copy><xsl:apply-templates select="@*|node()"/></xsl:copy>
  </xsl:template>
  <xsl:template match="order">
    <purchase><xsl:apply-templates select="@*|node()"/></purchase>
  </xsl:template>
  <xsl:template match="buyerID">
    <xsl:element name="buyer"><xsl:apply-templates/></xsl:element>
  </xsl:template>
</xsl:stylesheet>
