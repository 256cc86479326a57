<?xml version="1.0"?>
<!-- Sorts orders by symbol, then by numeric price descending; text output. -->
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="text"/>
  <xsl:template match="/">
    <xsl:for-each select="//order">
      <xsl:sort select="symbol"/>
      <xsl:sort select="price" data-type="number" order="descending"/>
      <xsl:value-of select="concat(symbol, ' ', price, ' ', buyerID, '&#10;')"/>
    </xsl:for-each>
  </xsl:template>
</xsl:stylesheet>
